/* Who meets when replicas average (src/parallel, the engine's lowest layer): groups of ranks
 * as rank numbers in rank order (every rank, the grid's rows, the nodes of the ranks that
 * average together, hier's groups), and the rules that choose between flat and two-level
 * averages, which the run's setup (src/train/setup.c) and the planner (src/plan) ask too.
 * Plain numbers: no StarPU, no tiles; the one collective call is tsr_dist_nodes (each rank's
 * node, as MPI sees it). */
#ifndef TSR_PARALLEL_MEMBERS_H
#define TSR_PARALLEL_MEMBERS_H

#include <stdbool.h>

#include "tessera/dist.h"

/* Ranks that average together. */
typedef struct {
  int n;
  int *ranks; /* in rank order */
} tsr__group_t;

/* The ranks of a run, as the averages see them. Under --grid PrxPc rank c Pr + p is grid column
 * c's rank of row p; a replica is a column, and a parameter's slice averages along its row. */
typedef struct {
  int rank, size;
  tsr__group_t all;    /* every rank */
  int grid_rows;       /* Pr (1: no grid, every rank one row) */
  tsr__group_t *rows;  /* [grid_rows] the ranks of each grid row, one per column */
  bool two_level;      /* averages go through the nodes (tsr_sync_t.allreduce) */
  int nnodes;          /* the nodes of this rank's peers (tsr__members_peers) */
  tsr__group_t *nodes; /* [nnodes] their peers, nodes numbered in order of their lowest ranks */
  int *node_of;        /* [size] each peer's node, -1 for the other ranks */
  int my_node;         /* this rank's */
  int per_node;        /* the most peers one node holds */
} tsr__members_t;

/* Every rank and the grid's rows (grid_rows divides size); no nodes yet. 0 or TSR_ENOMEM. */
int tsr__members_init(tsr__members_t *m, int rank, int size, int grid_rows);
void tsr__members_fini(tsr__members_t *m);
/* The ranks this rank averages a whole average with: every rank, or under a grid its row. */
const tsr__group_t *tsr__members_peers(const tsr__members_t *m);
bool tsr__group_has(const tsr__group_t *g, int rank);

/* --allreduce and --node-size: the nodes of this rank's peers (always: a collective call every
 * rank makes) and whether averages go through them (m->two_level). auto: where there are
 * several nodes and one holds several peers, homes not weighted by --shares (uneven) and a
 * policy that sums (async-epoch folds one rank after another). Under a grid each row averages
 * over its own nodes, so every row must lie alike on them: each makes descriptors of its nodes'
 * number and shape, and every rank creates the same descriptors in the same order (their MPI
 * tags). Asked for explicitly where it cannot be: TSR_EINVAL with the reason in err
 * (tsr_run_check refuses what it can tell before the nodes are known). */
int tsr__members_levels(tsr__members_t *m, const tsr_sync_t *sync, bool uneven, tsr_errbuf_t *err);

/* hier's groups: gs consecutive ranks each, or (gs 0) the ranks of each node MPI sees (a
 * collective call); under a grid, groups of whole grid columns (gs consecutive columns, or
 * those whose first rank is on one node), group g of columns being groups g Pr + p, its
 * columns' ranks of grid row p (in column order), so that each rank averages its slice with its
 * row's ranks of the group's other columns. *groups ([*n], tsr__groups_free) and this rank's
 * index in *mine. 0 or TSR_ENOMEM. */
int tsr__members_groups(const tsr__members_t *m, int gs, tsr__group_t **groups, int *n, int *mine);
void tsr__groups_free(tsr__group_t **groups, int n);

/* Why averages under sync cannot take two levels (--allreduce two-level) where, when uneven,
 * --shares other than uniform place the chunks' homes by rank: a sentence, or NULL where they
 * can. tsr_run_check refuses two-level asked for then; auto takes flat. */
const char *tsr__members_flat_only(const tsr_sync_t *sync, bool uneven);
/* Under a grid of pr rows (1: none, every rank one row) whose size ranks lie on the nodes
 * node_of (size entries, numbered from 0): the nodes a grid row's ranks (c pr + p, one a
 * column) lie on and the most of them one node holds, in *nodes and *per_node, returning NULL
 * where every row lies alike (as many nodes, as many ranks at most on one); else a sentence
 * why two levels cannot be taken. */
const char *tsr__members_row_nodes(const int *node_of, int size, int pr, int *nodes, int *per_node);
/* Whether averages go through nodes (two levels) under sync (uneven: --shares other than
 * uniform placing the homes) on nodes nodes of at most per_node of the ranks that average
 * together (every rank, or under a grid a grid row's: tsr__members_row_nodes): asked for
 * (--allreduce two-level), or auto where there are several nodes and one holds several such
 * ranks; never where tsr__members_flat_only gives a reason. The engine's rule, which the run's
 * setup and the planner describe with. */
bool tsr__members_two_level(const tsr_sync_t *sync, bool uneven, int nodes, int per_node);

#endif
