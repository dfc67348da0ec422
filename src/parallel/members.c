/* Who meets when replicas average (members.h): every rank, the grid's rows, the nodes of a
 * rank's peers, hier's groups, and the two-level rule. Numbers only: no StarPU, no tiles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/members.h"
#include "parallel/policy.h"
#include "try.h"

int tsr__members_init(tsr__members_t *m, int rank, int size, int pr) {
  memset(m, 0, sizeof *m);
  m->rank = rank, m->size = size, m->grid_rows = pr;
  m->all.n = size;
  if (!(m->all.ranks = malloc(sizeof(int) * (size_t)size))) return TSR_ENOMEM;
  for (int q = 0; q < size; q++)
    m->all.ranks[q] = q;
  if (!(m->rows = calloc((size_t)pr, sizeof *m->rows))) return TSR_ENOMEM;
  for (int p = 0; p < pr; p++) {
    if (!(m->rows[p].ranks = malloc(sizeof(int) * (size_t)(size / pr)))) return TSR_ENOMEM;
    for (int q = p; q < size; q += pr)
      m->rows[p].ranks[m->rows[p].n++] = q;
  }
  return 0;
}

void tsr__groups_free(tsr__group_t **groups, int n) {
  for (int g = 0; *groups && g < n; g++)
    free((*groups)[g].ranks);
  free(*groups), *groups = NULL;
}

void tsr__members_fini(tsr__members_t *m) {
  tsr__groups_free(&m->rows, m->grid_rows);
  tsr__groups_free(&m->nodes, m->nnodes);
  free(m->node_of), free(m->all.ranks);
  memset(m, 0, sizeof *m);
}

const tsr__group_t *tsr__members_peers(const tsr__members_t *m) {
  return m->grid_rows > 1 ? &m->rows[m->rank % m->grid_rows] : &m->all;
}

bool tsr__group_has(const tsr__group_t *g, int rank) {
  for (int t = 0; t < g->n; t++)
    if (g->ranks[t] == rank) return true;
  return false;
}

/* Each rank's node, of_rank[q] (size entries, the caller's), numbered in order of their lowest
 * ranks: groups of gs consecutive ranks, or (gs 0) the nodes MPI sees (a collective call).
 * Returns the number of nodes. */
static int rank_nodes(int size, int gs, int *of_rank) {
  if (gs == 0) return tsr_dist_nodes(of_rank);
  for (int q = 0; q < size; q++)
    of_rank[q] = q / gs;
  return (size + gs - 1) / gs;
}

/* The ranks cut into groups of gs consecutive ranks, or (gs 0) into the nodes MPI sees (a
 * collective call): *n groups in *groups, their ranks in rank order; of_rank[q] (size entries,
 * the caller's) is rank q's group. */
static int split_ranks(const tsr__members_t *m, int gs, int *n, tsr__group_t **groups,
                       int *of_rank) {
  *n = rank_nodes(m->size, gs, of_rank);
  if (!(*groups = calloc((size_t)*n, sizeof **groups))) return TSR_ENOMEM;
  for (int g = 0; g < *n; g++)
    if (!((*groups)[g].ranks = malloc(sizeof(int) * (size_t)m->size))) return TSR_ENOMEM;
  for (int q = 0; q < m->size; q++) {
    tsr__group_t *g = &(*groups)[of_rank[q]];
    g->ranks[g->n++] = q;
  }
  return 0;
}

/* hier under --grid PrxPc: groups of whole grid columns (tsr__members_groups). */
static int column_groups(const tsr__members_t *m, int gs, tsr__group_t **groups, int *n,
                         int *mine) {
  int pr = m->grid_rows, pc = m->size / pr, ncg = 0;
  int *of_col = malloc(sizeof(int) * (size_t)pc), *node_of = malloc(sizeof(int) * (size_t)m->size);
  int rc = of_col && node_of ? 0 : TSR_ENOMEM;
  if (rc == 0 && gs == 0) tsr_dist_nodes(node_of); /* collective */
  for (int c = 0; rc == 0 && c < pc; c++) {
    of_col[c] = gs > 0 ? c / gs : -1;
    for (int e = 0; gs == 0 && e < c && of_col[c] < 0; e++) /* nodes numbered as they appear */
      if (node_of[e * pr] == node_of[c * pr]) of_col[c] = of_col[e];
    if (of_col[c] < 0) of_col[c] = ncg;
    if (of_col[c] + 1 > ncg) ncg = of_col[c] + 1;
  }
  if (rc == 0 && !(*groups = calloc((size_t)ncg * (size_t)pr, sizeof **groups))) rc = TSR_ENOMEM;
  for (int g = 0; rc == 0 && g < ncg * pr; g++)
    if (!((*groups)[g].ranks = malloc(sizeof(int) * (size_t)pc))) rc = TSR_ENOMEM;
  for (int c = 0; rc == 0 && c < pc; c++)
    for (int p = 0; p < pr; p++) {
      tsr__group_t *g = &(*groups)[of_col[c] * pr + p];
      g->ranks[g->n++] = c * pr + p;
    }
  if (rc == 0) *n = ncg * pr, *mine = of_col[m->rank / pr] * pr + m->rank % pr;
  free(of_col), free(node_of);
  return rc;
}

int tsr__members_groups(const tsr__members_t *m, int gs, tsr__group_t **groups, int *n, int *mine) {
  *groups = NULL, *n = 0;
  if (m->grid_rows > 1) return column_groups(m, gs, groups, n, mine);
  int *group_of_rank = malloc(sizeof(int) * (size_t)m->size);
  int rc = group_of_rank ? split_ranks(m, gs, n, groups, group_of_rank) : TSR_ENOMEM;
  if (rc == 0) *mine = group_of_rank[m->rank];
  free(group_of_rank);
  return rc;
}

const char *tsr__members_flat_only(const tsr_sync_t *sync, bool uneven) {
  if (tsr__sync_policy(&sync->schedule)->folds)
    return "async-epoch folds one rank's weights after another into the global copy, so a "
           "node's ranks cannot be summed first";
  if (uneven) return "--shares other than uniform places the chunks' homes by rank";
  return NULL;
}

const char *tsr__members_row_nodes(const int *node_of, int size, int pr, int *nodes,
                                   int *per_node) {
  static char why[160];
  int *count = malloc(sizeof(int) * (size_t)size); /* node numbers are below the ranks */
  if (!count) return "out of memory";
  for (int p = 0; p < pr; p++) {
    int n = 0, most = 0;
    memset(count, 0, sizeof(int) * (size_t)size);
    for (int q = p; q < size; q += pr) {
      n += count[node_of[q]] == 0;
      if (++count[node_of[q]] > most) most = count[node_of[q]];
    }
    if (p == 0) {
      *nodes = n, *per_node = most;
    } else if (n != *nodes || most != *per_node) {
      snprintf(why, sizeof why,
               "the grid rows lie on the nodes unevenly (row 1 on %d node%s with at most %d of "
               "its ranks on one, row %d on %d with at most %d)",
               *nodes, *nodes == 1 ? "" : "s", *per_node, p + 1, n, most);
      free(count);
      return why;
    }
  }
  free(count);
  return NULL;
}

bool tsr__members_two_level(const tsr_sync_t *sync, bool uneven, int nodes, int per_node) {
  if (tsr__members_flat_only(sync, uneven)) return false;
  return sync->allreduce == TSR_ALLREDUCE_TWO_LEVEL ||
         (sync->allreduce == TSR_ALLREDUCE_AUTO && nodes > 1 && per_node > 1);
}

/* The nodes of the ranks this rank averages with (every rank; under a grid its grid row's, one
 * a column), from every rank's node (of_rank): m->nodes in order of their lowest ranks, each
 * member's index in m->node_of (-1 for the others), the most members one holds. */
static int member_nodes(tsr__members_t *m, const tsr__group_t *members, const int *of_rank) {
  int *index = malloc(sizeof(int) * (size_t)m->size);
  m->node_of = malloc(sizeof(int) * (size_t)m->size);
  m->nodes = calloc((size_t)members->n, sizeof *m->nodes);
  if (!index || !m->node_of || !m->nodes) {
    free(index);
    return TSR_ENOMEM;
  }
  for (int q = 0; q < m->size; q++)
    index[q] = -1, m->node_of[q] = -1;
  for (int t = 0; t < members->n; t++) {
    int q = members->ranks[t], n = of_rank[q];
    if (index[n] < 0) {
      index[n] = m->nnodes++;
      if (!(m->nodes[index[n]].ranks = malloc(sizeof(int) * (size_t)members->n))) {
        free(index);
        return TSR_ENOMEM;
      }
    }
    tsr__group_t *g = &m->nodes[index[n]];
    g->ranks[g->n++] = q, m->node_of[q] = index[n];
    if (g->n > m->per_node) m->per_node = g->n;
  }
  m->my_node = m->node_of[m->rank];
  free(index);
  return 0;
}

int tsr__members_levels(tsr__members_t *m, const tsr_sync_t *sync, bool uneven, tsr_errbuf_t *err) {
  int *of_rank = malloc(sizeof(int) * (size_t)m->size);
  if (!of_rank) return TSR_ENOMEM;
  rank_nodes(m->size, sync->node_size, of_rank);
  int pr = m->grid_rows, nodes = 0, per_node = 0;
  const char *why = tsr__members_flat_only(sync, uneven);
  const char *rows = tsr__members_row_nodes(of_rank, m->size, pr, &nodes, &per_node);
  int rc = member_nodes(m, pr > 1 ? &m->rows[m->rank % pr] : &m->all, of_rank);
  free(of_rank);
  TSR_TRY(rc);
  if (!why) why = rows;
  if (sync->allreduce == TSR_ALLREDUCE_TWO_LEVEL && why)
    return tsr_error_set(err, TSR_EINVAL, "--allreduce two-level: %s; use --allreduce flat or auto",
                         why);
  m->two_level = !why && tsr__members_two_level(sync, uneven, m->nnodes, m->per_node);
  return 0;
}
