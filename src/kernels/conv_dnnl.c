/* Convolutions through oneDNN (Debian's libdnnl-dev, the library PyTorch's CPU convolutions
 * use), on one thread: the fast CPU implementation of the three passes, beside conv.c's
 * convolution lowered to BLIS GEMMs, which stays the portable one (a build without oneDNN, a
 * tile whose rows are not contiguous, a shape oneDNN only serves with its reference code).
 *
 * The tiles stay as they are. Samples are rows stored (h, w, c), which is oneDNN's nhwc;
 * weights (kh kw c, oc) row-major are its hwio, which its direct (JIT) kernels do not read:
 * each call reorders them into the blocked layout the primitive chose (the filter gradient
 * back out of it), a pass over kh kw c oc floats against n oh ow times as many multiply-adds,
 * which shows where the images are small and the channels many (2x2x512 over 4 samples: the
 * reorder cost half the call): there the layer reorders once per step (tsr__k_dnnl_conv_wreorder
 * into a buffer of tsr__k_dnnl_conv_wfloats) and the calls take that copy (tsr_dnnl_blocked_t).
 * Making a primitive costs far more than running it on a tile, so each thread keeps the
 * primitives it made, one entry per shape, pass and tile size (a StarPU worker makes a layer's
 * on its first task). oneDNN runs its threads through OpenMP: every thread that calls in is
 * set to one OpenMP thread first, since StarPU's workers are the parallelism. The primitives'
 * scratch, the reordered weights and gradient come from the caller's work buffer
 * (tsr__k_dnnl_conv_work floats), so a step allocates nothing. The filter gradient of a 1x1
 * convolution, and of a wide one over a small tile, is not the primitive's but one oneDNN GEMM
 * (filter_by_gemm). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#ifdef TSR_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

/* What makes a primitive: the geometry, the tile's rows and its leading dimensions (part of
 * the memory descriptors), the pass, and what the pass fuses (ReLU forward, beta != 0 for the
 * filter gradient). */
typedef struct {
  tsr_conv_geom_t g;
  int n, pass, ld_in, ld_out, ldw, flag;
} dnnl_key_t;

enum { FWD, BWD_DATA, BWD_FILTER };

/* One shape's pass: the convolution, the weights' reorders around it and the memory objects
 * their buffers are attached to at each call. Work layout: [weights in the primitive's layout |
 * scratch | the bias gradient of a filter gradient that adds], each part 64-byte aligned. */
typedef struct {
  dnnl_key_t key;
  bool usable;           /* a primitive other than oneDNN's reference code was made */
  dnnl_primitive_t conv; /* the convolution pass */
  dnnl_primitive_t wre;  /* hwio -> the primitive's weights (FWD, BWD_DATA) or its filter
                          * gradient -> hwio (BWD_FILTER); NULL when the layouts agree */
  dnnl_memory_t act_in, act_out, user_w, conv_w, bias, scratch;
  dnnl_memory_desc_t w_md; /* the weights' (or the filter gradient's) layout in the primitive */
  size_t w_off, scratch_off, bias_off, floats;
  char impl[48];
} dnnl_entry_t;

typedef struct {
  dnnl_entry_t **e; /* each entry allocated on its own: its address (and impl) stays put */
  int n, cap, last; /* last: the entry found last, tried first */
  dnnl_stream_t stream;
} dnnl_cache_t;

static dnnl_engine_t engine;
static bool engine_ok;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;
static _Thread_local dnnl_cache_t *cache;

static void destroy_entry(dnnl_entry_t *e) {
  dnnl_primitive_destroy(e->conv), dnnl_primitive_destroy(e->wre);
  dnnl_memory_t m[] = {e->act_in, e->act_out, e->user_w, e->conv_w, e->bias, e->scratch};
  for (size_t i = 0; i < sizeof m / sizeof *m; i++)
    dnnl_memory_destroy(m[i]);
}

static void destroy_cache(void *p) {
  dnnl_cache_t *c = p;
  for (int i = 0; i < c->n; i++)
    destroy_entry(c->e[i]), free(c->e[i]);
  dnnl_stream_destroy(c->stream);
  free(c->e), free(c);
}

static void make_engine(void) {
  engine_ok = dnnl_engine_create(&engine, dnnl_cpu, 0) == dnnl_success &&
              pthread_key_create(&cache_key, destroy_cache) == 0;
}

/* This thread's cache, made with its stream on the first call; NULL when oneDNN has no CPU
 * engine here. */
static dnnl_cache_t *thread_cache(void) {
  if (cache) return cache;
  pthread_once(&engine_once, make_engine);
  if (!engine_ok) return NULL;
  dnnl_cache_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  if (dnnl_stream_create(&c->stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    free(c);
    return NULL;
  }
  omp_set_num_threads(1); /* this thread's OpenMP setting: oneDNN asks it at each call */
  pthread_setspecific(cache_key, c);
  return cache = c;
}

/* (n, c, h, w) of a tile of n samples stored (h, w, c), rows ld floats apart. */
static dnnl_status_t act_md(dnnl_memory_desc_t *md, int n, int c, int h, int w, int ld) {
  dnnl_dims_t dims = {n, c, h, w}, strides = {ld, 1, (dnnl_dim_t)w * c, c};
  return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

/* (oc, c, kh, kw) of weights stored (kh, kw, c, oc), rows (ky kx ci) ldw floats apart. */
static dnnl_status_t weights_md(dnnl_memory_desc_t *md, const tsr_conv_geom_t *g, int ldw) {
  dnnl_dims_t dims = {g->oc, g->c, g->kh, g->kw};
  dnnl_dims_t strides = {1, ldw, (dnnl_dim_t)g->kw * g->c * ldw, (dnnl_dim_t)g->c * ldw};
  return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

static dnnl_status_t any_md(dnnl_memory_desc_t *md, const tsr_conv_geom_t *g) {
  dnnl_dims_t dims = {g->oc, g->c, g->kh, g->kw};
  return dnnl_memory_desc_init_by_tag(md, 4, dims, dnnl_f32, dnnl_format_tag_any);
}

static dnnl_status_t bias_md(dnnl_memory_desc_t *md, int oc) {
  dnnl_dims_t dims = {oc};
  return dnnl_memory_desc_init_by_tag(md, 1, dims, dnnl_f32, dnnl_a);
}

/* The convolution's description for `pass` over this tile's memory descriptors. The padding
 * after the last window is what makes the output size come out (negative where the strides
 * leave input rows unread, as oneDNN allows). */
static dnnl_status_t conv_desc(dnnl_convolution_desc_t *d, int pass, const tsr_conv_geom_t *g,
                               const dnnl_memory_desc_t *x, const dnnl_memory_desc_t *w,
                               const dnnl_memory_desc_t *b, const dnnl_memory_desc_t *y) {
  dnnl_dims_t strides = {g->sh, g->sw}, pad_l = {g->ph, g->pw};
  dnnl_dims_t pad_r = {(dnnl_dim_t)(g->oh - 1) * g->sh + g->kh - g->h - g->ph,
                       (dnnl_dim_t)(g->ow - 1) * g->sw + g->kw - g->w - g->pw};
  if (pass == FWD)
    return dnnl_convolution_forward_desc_init(d, dnnl_forward_training, dnnl_convolution_direct, x,
                                              w, b, y, strides, pad_l, pad_r);
  if (pass == BWD_DATA)
    return dnnl_convolution_backward_data_desc_init(d, dnnl_convolution_direct, x, w, y, strides,
                                                    pad_l, pad_r);
  return dnnl_convolution_backward_weights_desc_init(d, dnnl_convolution_direct, x, w, b, y,
                                                     strides, pad_l, pad_r);
}

static size_t floats_of(const dnnl_memory_desc_t *md) {
  return (dnnl_memory_desc_get_size(md) + 63) / 64 * 16; /* 64-byte aligned parts */
}

static dnnl_status_t memory(dnnl_memory_t *m, const dnnl_memory_desc_t *md) {
  return dnnl_memory_create(m, md, engine, DNNL_MEMORY_NONE);
}

/* Makes e's primitives for e->key; false when oneDNN cannot, or offers only its reference
 * implementation (then the lowered kernel is faster). */
static bool make_entry(dnnl_entry_t *e) {
  const dnnl_key_t *k = &e->key;
  const tsr_conv_geom_t *g = &k->g;
  dnnl_memory_desc_t x, y, w_user, w_any, b;
  if (act_md(&x, k->n, g->c, g->h, g->w, k->ld_in) ||
      act_md(&y, k->n, g->oc, g->oh, g->ow, k->ld_out) || weights_md(&w_user, g, k->ldw) ||
      any_md(&w_any, g) || bias_md(&b, g->oc))
    return false;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_post_ops_t ops = NULL;
  dnnl_primitive_desc_t hint = NULL, pd = NULL, rpd = NULL;
  dnnl_convolution_desc_t fd, d;
  bool ok =
      dnnl_primitive_attr_create(&attr) == dnnl_success &&
      dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) == dnnl_success;
  if (ok && k->pass == FWD && k->flag) /* the ReLU after the bias */
    ok = dnnl_post_ops_create(&ops) == dnnl_success &&
         dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f) == dnnl_success &&
         dnnl_primitive_attr_set_post_ops(attr, ops) == dnnl_success;
  /* The backward passes are made against a forward primitive's description (hint). */
  if (ok && k->pass != FWD)
    ok = conv_desc(&fd, FWD, g, &x, &w_any, &b, &y) == dnnl_success &&
         dnnl_primitive_desc_create(&hint, &fd, NULL, engine, NULL) == dnnl_success;
  if (ok)
    ok = conv_desc(&d, k->pass, g, &x, &w_any, &b, &y) == dnnl_success &&
         dnnl_primitive_desc_create(&pd, &d, attr, engine, hint) == dnnl_success;
  const char *impl = NULL;
  if (ok) ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success;
  if (ok) {
    snprintf(e->impl, sizeof e->impl, "%s", impl);
    ok = strncmp(impl, "ref", 3) != 0;
  }
  const dnnl_memory_desc_t *w_conv = NULL, *scratch = NULL;
  if (ok) {
    w_conv = dnnl_primitive_desc_query_md(
        pd, k->pass == BWD_FILTER ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    ok = w_conv && scratch && dnnl_primitive_create(&e->conv, pd) == dnnl_success;
    if (ok) e->w_md = *w_conv;
  }
  bool same = ok && dnnl_memory_desc_equal(w_conv, &w_user);
  if (ok && !same) {
    /* The filter gradient leaves through the reorder; with beta it adds to what is there. */
    dnnl_primitive_attr_t rattr = NULL;
    dnnl_post_ops_t rops = NULL;
    if (k->pass == BWD_FILTER && k->flag)
      ok = dnnl_primitive_attr_create(&rattr) == dnnl_success &&
           dnnl_post_ops_create(&rops) == dnnl_success &&
           dnnl_post_ops_append_sum(rops, 1.0f) == dnnl_success &&
           dnnl_primitive_attr_set_post_ops(rattr, rops) == dnnl_success;
    if (ok)
      ok = (k->pass == BWD_FILTER
                ? dnnl_reorder_primitive_desc_create(&rpd, w_conv, engine, &w_user, engine, rattr)
                : dnnl_reorder_primitive_desc_create(&rpd, &w_user, engine, w_conv, engine,
                                                     NULL)) == dnnl_success &&
           dnnl_primitive_create(&e->wre, rpd) == dnnl_success;
    dnnl_post_ops_destroy(rops), dnnl_primitive_attr_destroy(rattr);
  }
  /* A filter gradient in hwio already, with beta: the primitive cannot add; never seen with
   * oneDNN's JIT kernels, which block their weights. */
  if (ok && same && k->pass == BWD_FILTER && k->flag) ok = false;
  if (ok) {
    e->w_off = 0;
    e->scratch_off = same ? 0 : floats_of(w_conv);
    e->bias_off = e->scratch_off + floats_of(scratch);
    e->floats = e->bias_off + (k->pass == BWD_FILTER && k->flag ? floats_of(&b) : 0);
    const dnnl_memory_desc_t *in = &x, *out = &y;
    ok = memory(&e->act_in, in) == dnnl_success && memory(&e->act_out, out) == dnnl_success &&
         memory(&e->user_w, &w_user) == dnnl_success &&
         memory(&e->conv_w, w_conv) == dnnl_success && memory(&e->bias, &b) == dnnl_success &&
         memory(&e->scratch, scratch) == dnnl_success;
  }
  dnnl_primitive_desc_destroy(rpd), dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_desc_destroy(hint), dnnl_post_ops_destroy(ops), dnnl_primitive_attr_destroy(attr);
  return ok;
}

/* This thread's entry for the key, made on first use; NULL when oneDNN cannot serve it. */
/* This thread's entry for the key, made on first use (also when oneDNN cannot serve it: the
 * refusal is kept, so it is not tried again). */
static dnnl_entry_t *find(const dnnl_key_t *key) {
  dnnl_cache_t *c = thread_cache();
  if (!c) return NULL;
  if (c->last < c->n && memcmp(&c->e[c->last]->key, key, sizeof *key) == 0) return c->e[c->last];
  for (int i = 0; i < c->n; i++)
    if (memcmp(&c->e[i]->key, key, sizeof *key) == 0) return c->e[c->last = i];
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    dnnl_entry_t **grown = realloc(c->e, sizeof *grown * (size_t)cap);
    if (!grown) return NULL;
    c->e = grown, c->cap = cap;
  }
  dnnl_entry_t *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->key = *key;
  e->usable = make_entry(e);
  if (!e->usable) { /* free what was made, keep the key and the name */
    destroy_entry(e);
    dnnl_entry_t kept = {.key = e->key};
    memcpy(kept.impl, e->impl, sizeof kept.impl);
    *e = kept;
  }
  c->e[c->n] = e;
  return c->e[c->last = c->n++];
}

/* The entry for the key when oneDNN serves it, else NULL. */
static dnnl_entry_t *entry(const dnnl_key_t *key) {
  dnnl_entry_t *e = find(key);
  return e && e->usable ? e : NULL;
}

static dnnl_key_t make_key(const tsr_conv_geom_t *g, int n, int pass, int ld_in, int ld_out,
                           int ldw, int flag) {
  dnnl_key_t k;
  memset(&k, 0, sizeof k); /* padding bytes too: keys are compared with memcmp */
  k.g = *g, k.n = n, k.pass = pass, k.ld_in = ld_in, k.ld_out = ld_out, k.ldw = ldw;
  k.flag = flag;
  return k;
}

static void attach(dnnl_memory_t m, const void *p) {
  dnnl_memory_set_data_handle(m, (void *)p);
}

static bool run(dnnl_entry_t *e, int nargs, const dnnl_exec_arg_t *args) {
  return dnnl_primitive_execute(e->conv, cache->stream, nargs, args) == dnnl_success &&
         dnnl_stream_wait(cache->stream) == dnnl_success;
}

/* The weights in the primitive's layout: w itself, the step's reordered copy wb where it was
 * made for a primitive that wants the same layout (an edge tile's may differ), or reordered
 * into work. */
static bool weights_in(dnnl_entry_t *e, const float *w, const tsr_dnnl_blocked_t *wb, float *work) {
  attach(e->user_w, w);
  if (!e->wre) {
    attach(e->conv_w, w);
    return true;
  }
  if (wb && wb->w) {
    dnnl_key_t k = e->key;
    k.n = wb->n;
    const dnnl_entry_t *made = entry(&k);
    if (made && dnnl_memory_desc_equal(&made->w_md, &e->w_md)) {
      attach(e->conv_w, wb->w);
      return true;
    }
  }
  attach(e->conv_w, work + e->w_off);
  dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, e->user_w}, {DNNL_ARG_TO, e->conv_w}};
  return dnnl_primitive_execute(e->wre, cache->stream, 2, a) == dnnl_success;
}

bool tsr__k_dnnl_built(void) {
  return true;
}

/* A 1x1 convolution without stride or padding: x's rows already are the GEMM's. */
static bool pointwise(const tsr_conv_geom_t *g) {
  return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->ph == 0 && g->pw == 0;
}

/* The leading dimension dnnl_sgemm reads rows of `cols` floats at: rows a multiple of 512 floats
 * (2 KB) apart fall into a few cache sets when it packs them, and its product ran at half speed
 * (x^T dy at 14x14x1024 -> 256: 46 GFLOP/s, 86 with the rows 16 floats longer). */
static int gemm_ld(int cols) {
  return cols % 512 == 0 ? cols + 16 : cols;
}

static int fan_in(const tsr_conv_geom_t *g) {
  return g->kh * g->kw * g->c;
}

/* x's rows lowered or copied first: a convolution other than pointwise (im2col, which for a
 * strided 1x1 gathers the sampled pixels), or rows that would alias. */
static bool copy_x(const tsr_conv_geom_t *g) {
  return !pointwise(g) || gemm_ld(g->c) != g->c;
}

static bool copy_dy(const tsr_conv_geom_t *g) {
  return gemm_ld(g->oc) != g->oc;
}

/* The filter gradient is one GEMM over the lowered input, lowered(x)^T dy, which oneDNN's
 * dnnl_sgemm runs faster than its backward-weights primitive with the gradient's reorder out of
 * the blocked layout on two kinds of shape (bench_conv, Zen 3):
 * - a 1x1 convolution without padding (no lowering but a strided one's gather): 1.19x as fast
 *   in the median, up to 1.85x, over the zoo's 49 (14x14x1024 -> 7x7x2048 stride 2: 85 against
 *   53 GFLOP/s), except over a narrow other side where rows would alias (fewer than 64 outputs
 *   for x's rows, 64 inputs for dy's), where copying them costs more than it saves and the
 *   primitive stays (14x14x512 -> 24 ran at 0.89x of it with the copy);
 * - any other convolution with a fan-in of at least 1152 (3x3 over 128 channels) over at most
 *   1024 output pixels a tile, lowered whole (4.7 M floats at 4608): 7x7x512 3x3 over 4 samples
 *   87 against 41 GFLOP/s, 4x4x512 over 64 87 against 50, 14x14x256 69 against 64; at 4096
 *   pixels (8x8x256 over 64) the primitive was faster again. */
static bool filter_by_gemm(const tsr_conv_geom_t *g, int n) {
  if (g->kh == 1 && g->kw == 1 && g->ph == 0 && g->pw == 0)
    return (gemm_ld(g->c) == g->c || g->oc >= 64) && (!copy_dy(g) || g->c >= 64);
  return fan_in(g) >= 1152 && (long)n * g->oh * g->ow <= 1024;
}

static size_t filter_gemm_work(const tsr_conv_geom_t *g, int n) {
  size_t m = (size_t)n * g->oh * g->ow, f = 16;
  if (copy_x(g)) f += m * (size_t)gemm_ld(fan_in(g));
  if (copy_dy(g)) f += m * (size_t)gemm_ld(g->oc);
  return f;
}

/* dw = beta dw + lowered(x)^T dy, db = beta db + column sums of dy, for a tile of whole
 * samples. */
static bool filter_gemm(const tsr_conv_geom_t *g, int n, float *dw, int lddw, float *db,
                        const float *x, int ldx, const float *dy, float beta, float *work) {
  int m = n * g->oh * g->ow, k = fan_in(g), ldc = k, ldd = g->oc;
  const float *col = x, *d = dy;
  if (copy_x(g)) {
    ldc = gemm_ld(k);
    if (pointwise(g))
      tsr__k_copy(m, k, work, ldc, x, k);
    else
      tsr__k_im2col(g, n, work, ldc, x, ldx);
    col = work, work += (size_t)m * ldc;
  }
  if (copy_dy(g)) {
    ldd = gemm_ld(g->oc);
    tsr__k_copy(m, g->oc, work, ldd, dy, g->oc);
    d = work;
  }
  if (!tsr__k_gemm_dnnl(true, false, k, g->oc, m, 1.0f, col, ldc, d, ldd, beta, dw, lddw))
    return false;
  tsr__k_bias_grad(m, g->oc, db, dy, g->oc, beta);
  return true;
}

const char *tsr__k_dnnl_version(void) {
  static char text[48];
  const dnnl_version_t *v = dnnl_version();
  snprintf(text, sizeof text, "oneDNN %d.%d.%d (%s)", v->major, v->minor, v->patch,
           v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : "other runtime");
  return text;
}

bool tsr__k_dnnl_conv_dense(const tsr_conv_geom_t *g, int n, int ld_in, int ld_out, int ldw) {
  (void)n;
  return ld_in == g->h * g->w * g->c && ld_out == g->oh * g->ow * g->oc && ldw == g->oc;
}

size_t tsr__k_dnnl_conv_work(const tsr_conv_geom_t *g, int n, int pass, bool flag) {
  if (pass == BWD_FILTER && filter_by_gemm(g, n)) return filter_gemm_work(g, n);
  int in = g->h * g->w * g->c, out = g->oh * g->ow * g->oc;
  dnnl_key_t k = make_key(g, n, pass, in, out, g->oc, flag);
  dnnl_entry_t *e = entry(&k);
  return e ? e->floats : 0;
}

const char *tsr__k_dnnl_conv_impl(const tsr_conv_geom_t *g, int n, int pass) {
  if (pass == BWD_FILTER && filter_by_gemm(g, n)) return "gemm:dnnl_sgemm";
  int in = g->h * g->w * g->c, out = g->oh * g->ow * g->oc;
  dnnl_key_t k = make_key(g, n, pass, in, out, g->oc, 0);
  dnnl_entry_t *e = find(&k);
  if (!e || !e->impl[0]) return "none";
  return e->impl; /* "ref:any" where refused for oneDNN's reference code */
}

size_t tsr__k_dnnl_conv_wfloats(const tsr_conv_geom_t *g, int n, int pass, bool flag) {
  if (pass != FWD && pass != BWD_DATA) return 0;
  int in = g->h * g->w * g->c, out = g->oh * g->ow * g->oc;
  dnnl_key_t k = make_key(g, n, pass, in, out, g->oc, flag);
  dnnl_entry_t *e = entry(&k);
  return e && e->wre ? floats_of(&e->w_md) : 0;
}

bool tsr__k_dnnl_conv_wreorder(const tsr_conv_geom_t *g, int n, int pass, bool flag, const float *w,
                               int ldw, float *wb) {
  if ((pass != FWD && pass != BWD_DATA) || ldw != g->oc) return false;
  int in = g->h * g->w * g->c, out = g->oh * g->ow * g->oc;
  dnnl_key_t k = make_key(g, n, pass, in, out, ldw, flag);
  dnnl_entry_t *e = entry(&k);
  if (!e || !e->wre) return false;
  attach(e->user_w, w), attach(e->conv_w, wb);
  dnnl_exec_arg_t a[] = {{DNNL_ARG_FROM, e->user_w}, {DNNL_ARG_TO, e->conv_w}};
  return dnnl_primitive_execute(e->wre, cache->stream, 2, a) == dnnl_success &&
         dnnl_stream_wait(cache->stream) == dnnl_success;
}

bool tsr__k_dnnl_conv_fwd(const tsr_conv_geom_t *g, int n, float *y, int ldy, const float *x,
                          int ldx, const float *w, int ldw, const float *b, bool relu,
                          const tsr_dnnl_blocked_t *wb, float *work) {
  /* Only whole samples back to back: the work the caller sized is that layout's. */
  if (!tsr__k_dnnl_conv_dense(g, n, ldx, ldy, ldw)) return false;
  dnnl_key_t k = make_key(g, n, FWD, ldx, ldy, ldw, relu);
  dnnl_entry_t *e = entry(&k);
  if (!e || !weights_in(e, w, wb, work)) return false;
  attach(e->act_in, x), attach(e->act_out, y), attach(e->bias, b);
  attach(e->scratch, work + e->scratch_off);
  dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, e->act_in},
                         {DNNL_ARG_WEIGHTS, e->conv_w},
                         {DNNL_ARG_BIAS, e->bias},
                         {DNNL_ARG_DST, e->act_out},
                         {DNNL_ARG_SCRATCHPAD, e->scratch}};
  return run(e, 5, a);
}

bool tsr__k_dnnl_conv_bwd_data(const tsr_conv_geom_t *g, int n, float *dx, int lddx,
                               const float *dy, int lddy, const float *w, int ldw,
                               const tsr_dnnl_blocked_t *wb, float *work) {
  if (!tsr__k_dnnl_conv_dense(g, n, lddx, lddy, ldw)) return false;
  dnnl_key_t k = make_key(g, n, BWD_DATA, lddx, lddy, ldw, 0);
  dnnl_entry_t *e = entry(&k);
  if (!e || !weights_in(e, w, wb, work)) return false;
  attach(e->act_in, dx), attach(e->act_out, dy), attach(e->scratch, work + e->scratch_off);
  dnnl_exec_arg_t a[] = {{DNNL_ARG_DIFF_DST, e->act_out},
                         {DNNL_ARG_WEIGHTS, e->conv_w},
                         {DNNL_ARG_DIFF_SRC, e->act_in},
                         {DNNL_ARG_SCRATCHPAD, e->scratch}};
  return run(e, 4, a);
}

bool tsr__k_dnnl_conv_bwd_filter(const tsr_conv_geom_t *g, int n, float *dw, int lddw, float *db,
                                 const float *x, int ldx, const float *dy, int lddy, float beta,
                                 float *work) {
  /* beta is 0 (the first tile writes) or 1 (the next add): the codelets' only two. */
  if ((beta != 0.0f && beta != 1.0f) || !tsr__k_dnnl_conv_dense(g, n, ldx, lddy, lddw))
    return false;
  if (filter_by_gemm(g, n)) return filter_gemm(g, n, dw, lddw, db, x, ldx, dy, beta, work);
  dnnl_key_t k = make_key(g, n, BWD_FILTER, ldx, lddy, lddw, beta != 0.0f);
  dnnl_entry_t *e = entry(&k);
  if (!e) return false;
  /* The bias gradient lands in db, or with beta next to the weights' and is added. */
  float *bias = db;
  if (beta != 0.0f) bias = work + e->bias_off;
  attach(e->act_in, x), attach(e->act_out, dy), attach(e->bias, bias);
  attach(e->user_w, dw), attach(e->conv_w, e->wre ? work + e->w_off : dw);
  attach(e->scratch, work + e->scratch_off);
  dnnl_exec_arg_t a[] = {{DNNL_ARG_SRC, e->act_in},
                         {DNNL_ARG_DIFF_DST, e->act_out},
                         {DNNL_ARG_DIFF_WEIGHTS, e->conv_w},
                         {DNNL_ARG_DIFF_BIAS, e->bias},
                         {DNNL_ARG_SCRATCHPAD, e->scratch}};
  if (!run(e, 5, a)) return false;
  if (e->wre) {
    dnnl_exec_arg_t r[] = {{DNNL_ARG_FROM, e->conv_w}, {DNNL_ARG_TO, e->user_w}};
    if (dnnl_primitive_execute(e->wre, cache->stream, 2, r) != dnnl_success) return false;
  }
  if (beta != 0.0f)
    for (int j = 0; j < g->oc; j++)
      db[j] += bias[j];
  return true;
}

#else /* built without oneDNN */

bool tsr__k_dnnl_built(void) {
  return false;
}

const char *tsr__k_dnnl_version(void) {
  return "not built (no libdnnl-dev)";
}

bool tsr__k_dnnl_conv_dense(const tsr_conv_geom_t *g, int n, int ld_in, int ld_out, int ldw) {
  (void)g, (void)n, (void)ld_in, (void)ld_out, (void)ldw;
  return false;
}

size_t tsr__k_dnnl_conv_work(const tsr_conv_geom_t *g, int n, int pass, bool flag) {
  (void)g, (void)n, (void)pass, (void)flag;
  return 0;
}

const char *tsr__k_dnnl_conv_impl(const tsr_conv_geom_t *g, int n, int pass) {
  (void)g, (void)n, (void)pass;
  return "none";
}

size_t tsr__k_dnnl_conv_wfloats(const tsr_conv_geom_t *g, int n, int pass, bool flag) {
  (void)g, (void)n, (void)pass, (void)flag;
  return 0;
}

bool tsr__k_dnnl_conv_wreorder(const tsr_conv_geom_t *g, int n, int pass, bool flag, const float *w,
                               int ldw, float *wb) {
  (void)g, (void)n, (void)pass, (void)flag, (void)w, (void)ldw, (void)wb;
  return false;
}

bool tsr__k_dnnl_conv_fwd(const tsr_conv_geom_t *g, int n, float *y, int ldy, const float *x,
                          int ldx, const float *w, int ldw, const float *b, bool relu,
                          const tsr_dnnl_blocked_t *wb, float *work) {
  (void)g, (void)n, (void)y, (void)ldy, (void)x, (void)ldx, (void)w, (void)ldw, (void)b;
  (void)relu, (void)wb, (void)work;
  return false;
}

bool tsr__k_dnnl_conv_bwd_data(const tsr_conv_geom_t *g, int n, float *dx, int lddx,
                               const float *dy, int lddy, const float *w, int ldw,
                               const tsr_dnnl_blocked_t *wb, float *work) {
  (void)g, (void)n, (void)dx, (void)lddx, (void)dy, (void)lddy, (void)w, (void)ldw, (void)wb;
  (void)work;
  return false;
}

bool tsr__k_dnnl_conv_bwd_filter(const tsr_conv_geom_t *g, int n, float *dw, int lddw, float *db,
                                 const float *x, int ldx, const float *dy, int lddy, float beta,
                                 float *work) {
  (void)g, (void)n, (void)dw, (void)lddw, (void)db, (void)x, (void)ldx, (void)dy, (void)lddy;
  (void)beta, (void)work;
  return false;
}

#endif
