/* Learning-rate schedules and the validation split (src/optim/schedule.c,
 * src/train/validation.c): each schedule's rate per step against a hand-computed table,
 * --lr-schedule's text read and refused, reduce-on-plateau and early stopping on made-up loss
 * sequences, the held-out samples' count and determinism, and early stopping ending a real run
 * whose validation loss rises (docs/training.md, "Learning-rate schedules"). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"

#include "training.h"

TestSuite(schedule);

static void start(void) {
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_runtime_init(NULL, &err), 0, "%s", err.msg);
}

static void stop(void) {
  tsr_runtime_fini();
}

TestSuite(schedule_run, .init = start, .fini = stop, .timeout = 300);

static void expect_rate(double got, double want, const char *what, int64_t t) {
  cr_expect(fabs(got - want) <= 1e-15 * fabs(want), "%s, step %lld: %.17g, want %.17g", what,
            (long long)t, got, want);
}

/* Cosine over T = 8 steps: (1 + cos(pi t / 8)) / 2. */
Test(schedule, cosine_alone_is_the_closed_formula) {
  tsr_lr_opts_t lr = {0};
  static const double want[8] = {
      1.0, 0.96193976625564337, 0.85355339059327373, 0.69134171618254492,
      0.5, 0.30865828381745514, 0.14644660940672627, 0.038060233744356631};
  for (int64_t t = 0; t < 8; t++)
    expect_rate(tsr_lr_at(TSR_LR_COSINE, &lr, 1.0, t, 1, 8, 1.0), want[t], "cosine", t);
}

/* Warm-up of 2 steps on cosine over T = 10: steps 0 and 1 at 1/2 and 2/2, then cosine's clock
 * starts at step 2 over the 8 steps left (the table above, moved by 2). */
Test(schedule, warmup_ramps_then_cosine_starts_its_clock) {
  tsr_lr_opts_t lr = {.warmup = 2};
  static const double want[10] = {0.5,
                                  1.0,
                                  1.0,
                                  0.96193976625564337,
                                  0.85355339059327373,
                                  0.69134171618254492,
                                  0.5,
                                  0.30865828381745514,
                                  0.14644660940672627,
                                  0.038060233744356631};
  for (int64_t t = 0; t < 10; t++)
    expect_rate(tsr_lr_at(TSR_LR_COSINE, &lr, 1.0, t, 1, 10, 1.0), want[t], "warm-up 2, cosine", t);
}

/* Warm-up of 4 on a constant 0.1: 0.025, 0.05, 0.075, then 0.1 on. */
Test(schedule, warmup_on_a_constant_rate) {
  tsr_lr_opts_t lr = {.warmup = 4};
  static const double want[6] = {0.025, 0.05, 0.075, 0.1, 0.1, 0.1};
  for (int64_t t = 0; t < 6; t++)
    expect_rate(tsr_lr_at(TSR_LR_CONSTANT, &lr, 0.1, t, 1, 6, 1.0), want[t], "warm-up 4", t);
}

/* step:2,3:0.5 with 3 steps an epoch from 0.8: epochs 1 and 2 at 0.8, 3 at 0.4, 4 on at 0.2
 * (PyTorch's MultiStepLR(milestones=[2, 3], gamma=0.5) stepped per epoch); with a warm-up of
 * 3 steps, epoch 1 ramps 0.8/3, 1.6/3, 0.8. */
Test(schedule, step_decay_after_each_listed_epoch) {
  tsr_lr_opts_t lr = {.n_milestones = 2, .milestones = {2, 3}, .factor = 0.5};
  static const double want[15] = {0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.4, 0.4,
                                  0.4, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2};
  for (int64_t t = 0; t < 15; t++)
    expect_rate(tsr_lr_at(TSR_LR_STEP, &lr, 0.8, t, (int)(t / 3) + 1, 15, 1.0), want[t],
                "step:2,3:0.5", t);
  lr.warmup = 3;
  static const double warm[4] = {0.8 / 3, 1.6 / 3, 0.8, 0.8};
  for (int64_t t = 0; t < 4; t++)
    expect_rate(tsr_lr_at(TSR_LR_STEP, &lr, 0.8, t, (int)(t / 3) + 1, 15, 1.0), warm[t],
                "step:2,3:0.5 with warm-up 3", t);
}

/* Plateau: the base rate times the reductions so far, whatever the step. */
Test(schedule, plateau_rate_is_the_base_times_its_factor) {
  tsr_lr_opts_t lr = {.patience = 10, .factor = 0.1};
  expect_rate(tsr_lr_at(TSR_LR_PLATEAU, &lr, 0.8, 37, 4, 100, 0.25), 0.2, "plateau", 37);
  expect_rate(tsr_lr_at(TSR_LR_PLATEAU, &lr, 0.8, 0, 1, 100, 1.0), 0.8, "plateau", 0);
}

/* ---- --lr-schedule's text -------------------------------------------------- */

Test(schedule, texts_read_and_read_back) {
  static const char *const good[] = {"cosine",  "constant",  "step:30,60:0.1", "step:2:0.5",
                                     "plateau", "plateau:3", "plateau:0:0.5"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
    tsr_lr_opts_t lr = {0}, again = {0};
    tsr_lr_schedule_t kind = TSR_LR_CONSTANT, kind2 = TSR_LR_COSINE;
    tsr_errbuf_t err = {""};
    cr_assert_eq(tsr_lr_schedule_parse(good[i], &kind, &lr, &err), 0, "%s: %s", good[i], err.msg);
    char text[128];
    tsr_lr_schedule_describe(kind, &lr, text, sizeof text);
    cr_assert_eq(tsr_lr_schedule_parse(text, &kind2, &again, &err), 0, "%s: %s", text, err.msg);
    cr_expect_eq(kind, kind2, "%s read back from %s", good[i], text);
    cr_expect_eq(memcmp(&lr, &again, sizeof lr), 0, "%s read back from %s", good[i], text);
  }
  tsr_lr_opts_t lr = {0};
  tsr_lr_schedule_t kind;
  cr_assert_eq(tsr_lr_schedule_parse("plateau", &kind, &lr, NULL), 0);
  cr_expect(kind == TSR_LR_PLATEAU && lr.patience == 10 && lr.factor == 0.1 && lr.threshold == 1e-4,
            "plateau's defaults are PyTorch's: patience %d factor %g threshold %g", lr.patience,
            lr.factor, lr.threshold);
  cr_assert_eq(tsr_lr_schedule_parse("step:30,60:0.1", &kind, &lr, NULL), 0);
  cr_expect(kind == TSR_LR_STEP && lr.n_milestones == 2 && lr.milestones[0] == 30 &&
            lr.milestones[1] == 60 && lr.factor == 0.1);
}

Test(schedule, bad_texts_are_refused_saying_what_is_wrong) {
  static const struct {
    const char *text, *says;
  } bad[] = {
      {"linear", "expected cosine, constant, step"},
      {"step", "expected cosine, constant, step"},
      {"step:", "expected step:E1,E2,...:FACTOR"},
      {"step:30,60", "expected step:E1,E2,...:FACTOR"},
      {"step:30,60:0", "FACTOR must be a number > 0"},
      {"step:30,60:-0.1", "FACTOR must be a number > 0"},
      {"step:30,60:x", "FACTOR must be a number > 0"},
      {"step:60,30:0.1", "strictly increasing"},
      {"step:30,30:0.1", "strictly increasing"},
      {"step:0,30:0.1", "integers from 1"},
      {"step:30,:0.1", "missing after the last comma"},
      {"step:a:0.1", "integers from 1"},
      {"plateau:", "PATIENCE must be an integer"},
      {"plateau:-1", "PATIENCE must be an integer"},
      {"plateau:3:0", "FACTOR must be a number in (0, 1)"},
      {"plateau:3:1", "FACTOR must be a number in (0, 1)"},
      {"plateau:3:1.5", "FACTOR must be a number in (0, 1)"},
      {"plateaux", "expected plateau, plateau:PATIENCE"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    tsr_lr_opts_t lr = {.factor = 7}, before = lr;
    tsr_lr_schedule_t kind = TSR_LR_COSINE;
    tsr_errbuf_t err = {""};
    cr_expect_eq(tsr_lr_schedule_parse(bad[i].text, &kind, &lr, &err), TSR_EINVAL, "%s read",
                 bad[i].text);
    cr_expect(strstr(err.msg, bad[i].says) && strstr(err.msg, bad[i].text), "%s: '%s'", bad[i].text,
              err.msg);
    cr_expect(kind == TSR_LR_COSINE && memcmp(&lr, &before, sizeof lr) == 0,
              "%s: a refused text changed the schedule", bad[i].text);
  }
}

/* ---- The schedules on the validation loss ---------------------------------- */

/* patience 2, factor 0.5, threshold 1e-4 (relative): 0.49996 is no improvement on 0.5 (it
 * needs < 0.49995); the third bad epoch in a row reduces (more than patience), and counting
 * starts again: PyTorch's ReduceLROnPlateau on the same sequence reduces at epochs 5 and 9. */
Test(schedule, plateau_reduces_after_more_than_patience_bad_epochs) {
  tsr_lr_opts_t lr = {.patience = 2, .factor = 0.5, .threshold = 1e-4};
  static const double loss[] = {1.0, 0.5, 0.49996, 0.6, 0.7, 0.45, 0.46, 0.46, 0.46, 0.44};
  static const bool reduced[] = {false, false, false, false, true,
                                 false, false, false, true,  false};
  static const double factor[] = {1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25};
  tsr_schedule_state_t s;
  tsr_schedule_state_init(&s);
  for (int e = 0; e < 10; e++) {
    bool r = tsr_lr_plateau_update(&s, &lr, 0.1, loss[e]);
    cr_expect_eq(r, reduced[e], "epoch %d (loss %g): reduced %d", e + 1, loss[e], r);
    cr_expect_eq(s.lr_factor, factor[e], "epoch %d: factor %g, want %g", e + 1, s.lr_factor,
                 factor[e]);
  }
  cr_expect_eq(s.plateau_best, 0.44);
  /* Patience 0: every epoch without improvement reduces; NaN is no improvement. */
  tsr_lr_opts_t eager = {.patience = 0, .factor = 0.1, .threshold = 1e-4};
  tsr_schedule_state_init(&s);
  cr_expect(!tsr_lr_plateau_update(&s, &eager, 0.1, 1.0));
  cr_expect(tsr_lr_plateau_update(&s, &eager, 0.1, 1.0));
  cr_expect(tsr_lr_plateau_update(&s, &eager, 0.1, NAN));
  cr_expect(fabs(s.lr_factor - 0.01) < 1e-17, "factor %g", s.lr_factor);
  /* A reduction of 1e-8 or less is not taken (PyTorch's eps). */
  tsr_schedule_state_init(&s);
  (void)tsr_lr_plateau_update(&s, &eager, 1e-8, 1.0);
  cr_expect(!tsr_lr_plateau_update(&s, &eager, 1e-8, 2.0), "a 5e-9 reduction was taken");
  cr_expect_eq(s.lr_factor, 1.0);
}

/* patience 2: 0.8 at epoch 2 is the lowest; 0.9 and 0.8 (not lower) are two epochs without
 * improvement: stop after epoch 4. */
Test(schedule, early_stopping_after_patience_epochs_without_a_lower_loss) {
  static const double loss[] = {1.0, 0.8, 0.9, 0.8, 0.7};
  static const bool stop[] = {false, false, false, true};
  tsr_schedule_state_t s;
  tsr_schedule_state_init(&s);
  for (int e = 0; e < 4; e++)
    cr_expect_eq(tsr_early_stop_update(&s, 2, loss[e], e + 1), stop[e], "epoch %d", e + 1);
  cr_expect(s.early_best == 0.8 && s.early_best_epoch == 2, "best %g at %d", s.early_best,
            s.early_best_epoch);
  tsr_schedule_state_init(&s);
  cr_expect(!tsr_early_stop_update(&s, 1, 1.0, 1));
  cr_expect(tsr_early_stop_update(&s, 1, NAN, 2), "a NaN loss improved");
}

/* What --early-stop 3 promises (docs/training.md): the run ends after 3 epochs in a row whose
 * validation loss is not below the lowest so far, and a new lowest starts the count again. A
 * user sees it go wrong as a run cut short right after an improvement, or one that never stops.
 * Epoch 4 is a new best after two bad epochs (the count starts again: no stop at epoch 5);
 * epoch 6 is below epoch 5 but not below the best (still bad: the count is against the best,
 * not the previous epoch); epoch 7 equals the best (not below it: bad), the third in a row:
 * stop after epoch 7, with epoch 4's loss as the best. */
Test(schedule, early_stopping_counts_again_from_every_new_best) {
  static const double loss[] = {1.0, 1.1, 1.2, 0.9, 1.0, 0.95, 0.9};
  static const int bad[] = {0, 1, 2, 0, 1, 2, 3};
  tsr_schedule_state_t s;
  tsr_schedule_state_init(&s);
  for (int e = 0; e < 7; e++) {
    bool stop = tsr_early_stop_update(&s, 3, loss[e], e + 1);
    cr_expect_eq(stop, e == 6, "epoch %d (loss %g): %s", e + 1, loss[e],
                 stop ? "stopped" : "did not stop");
    cr_expect_eq(s.early_bad, bad[e], "epoch %d: %d epochs without a lower loss counted, not %d",
                 e + 1, s.early_bad, bad[e]);
  }
  cr_expect(s.early_best == 0.9 && s.early_best_epoch == 4, "best %g at epoch %d", s.early_best,
            s.early_best_epoch);
}

/* ---- The validation split ---------------------------------------------------- */

/* n samples whose features are (i, -i) and labels i % 3. */
static tsr_dataset_t numbered(int64_t n) {
  tsr_dataset_t d = {.n = n, .features = 2, .classes = 3, .channels = 1, .height = 1, .width = 2};
  d.x = malloc(sizeof(float) * (size_t)n * 2), d.y = malloc(sizeof(float) * (size_t)n);
  for (int64_t i = 0; i < n; i++)
    d.x[2 * i] = (float)i, d.x[2 * i + 1] = (float)-i, d.y[i] = (float)(i % 3);
  return d;
}

/* Which samples were held out: held[i] for sample i, checking rows and order on the way. */
static void held_out(const tsr_dataset_t *train, const tsr_dataset_t *val, int64_t n, char *held) {
  memset(held, 0, (size_t)n);
  const tsr_dataset_t *parts[2] = {train, val};
  for (int k = 0; k < 2; k++)
    for (int64_t j = 0; j < parts[k]->n; j++) {
      float i = parts[k]->x[2 * j];
      cr_assert(parts[k]->x[2 * j + 1] == -i && parts[k]->y[j] == (float)((int64_t)i % 3),
                "row %lld of part %d is not a whole sample", (long long)j, k);
      cr_assert(j == 0 || parts[k]->x[2 * (j - 1)] < i, "part %d is not in the file's order", k);
      cr_assert(held[(int64_t)i] == 0, "sample %g is in both parts", (double)i);
      held[(int64_t)i] = (char)(1 + k);
    }
  for (int64_t i = 0; i < n; i++)
    cr_assert(held[i], "sample %lld is lost", (long long)i);
}

Test(schedule, the_split_holds_out_round_f_n_chosen_by_the_seed_alone) {
  static const struct {
    int64_t n;
    double f;
    int64_t want;
  } sizes[] = {{100, 0.1, 10}, {100, 0.25, 25}, {10, 0.25, 3}, {7, 0.5, 4}, {1000, 0.001, 1}};
  for (size_t c = 0; c < sizeof sizes / sizeof *sizes; c++) {
    tsr_dataset_t train = numbered(sizes[c].n), val;
    tsr_errbuf_t err = {""};
    cr_assert_eq(tsr_validation_split(&train, &val, sizes[c].f, 1, &err), 0, "%s", err.msg);
    cr_expect_eq(val.n, sizes[c].want, "%g of %lld: %lld held out", sizes[c].f,
                 (long long)sizes[c].n, (long long)val.n);
    cr_expect_eq(train.n + val.n, sizes[c].n);
    cr_expect(val.classes == 3 && val.features == 2 && val.width == 2);
    tsr_dataset_fini(&train), tsr_dataset_fini(&val);
  }
  /* The same seed holds out the same samples (every rank, any number of ranks: the split
   * reads nothing else); another seed others. */
  char first[200], again[200], other[200];
  char *into[3] = {first, again, other};
  uint64_t seeds[3] = {7, 7, 8};
  for (int k = 0; k < 3; k++) {
    tsr_dataset_t train = numbered(200), val;
    cr_assert_eq(tsr_validation_split(&train, &val, 0.2, seeds[k], NULL), 0);
    held_out(&train, &val, 200, into[k]);
    tsr_dataset_fini(&train), tsr_dataset_fini(&val);
  }
  cr_expect_eq(memcmp(first, again, 200), 0, "seed 7 held out other samples the second time");
  cr_expect_neq(memcmp(first, other, 200), 0, "seeds 7 and 8 held out the same samples");
  /* Not the first or last fifth: drawn over the whole set. */
  int early = 0;
  for (int i = 0; i < 40; i++)
    early += first[i] == 2;
  cr_expect(early > 0 && early < 40, "%d of the first 40 held out", early);
}

Test(schedule, a_split_that_leaves_a_side_empty_is_refused) {
  static const struct {
    int64_t n;
    double f;
    const char *says;
  } bad[] = {{100, 0, "expected a fraction of the training set in (0, 1)"},
             {100, 1, "expected a fraction of the training set in (0, 1)"},
             {100, -0.5, "expected a fraction"},
             {10, 0.01, "holds out 0"},
             {10, 0.97, "holds out 10"}};
  for (size_t c = 0; c < sizeof bad / sizeof *bad; c++) {
    tsr_dataset_t train = numbered(bad[c].n), val;
    tsr_errbuf_t err = {""};
    cr_expect_eq(tsr_validation_split(&train, &val, bad[c].f, 1, &err), TSR_EINVAL);
    cr_expect(strstr(err.msg, "--val-split") && strstr(err.msg, bad[c].says), "%g of %lld: %s",
              bad[c].f, (long long)bad[c].n, err.msg);
    cr_expect_eq(train.n, bad[c].n, "a refused split changed the training set");
    tsr_dataset_fini(&train), tsr_dataset_fini(&val);
  }
}

/* ---- A real run ------------------------------------------------------------------ */

typedef struct {
  int n;
  double val_loss[40];
  bool stopped_said;
} seen_t;

static int keep(const tsr_epoch_stats_t *s, void *ctx) {
  seen_t *seen = ctx;
  cr_assert(s->val_samples > 0, "epoch %d without its validation loss", s->epoch);
  seen->val_loss[seen->n++] = s->val_loss;
  seen->stopped_said = s->stopped && strstr(s->stopped, "early stopping");
  return 0;
}

/* A validation set that the training makes worse: the first 256 training images with every
 * label moved by one class. As the net learns the training labels the validation loss rises
 * after its first epochs, so --early-stop 2 ends a 30-epoch run early, with status 0, the
 * last epoch's stats saying why; the epochs' losses show the rule held. */
Test(schedule_run, early_stopping_ends_a_run_whose_validation_loss_rises) {
  tsr_dataset_t train = {0}, test = {0};
  load(&train, &test, 512);
  tsr_dataset_t val = train;
  val.n = 256;
  val.x = malloc(sizeof(float) * 256 * (size_t)train.features);
  val.y = malloc(sizeof(float) * 256);
  memcpy(val.x, train.x, sizeof(float) * 256 * (size_t)train.features);
  for (int i = 0; i < 256; i++)
    val.y[i] = (float)(((int)train.y[i] + 1) % train.classes);
  tsr_model_spec_t spec;
  tsr_errbuf_t err = {""};
  cr_assert_eq(tsr_model_parse(&spec, "mlp:32", train.classes, &err), 0, "%s", err.msg);
  tsr_net_opts_t no;
  tsr_net_opts_init(&no);
  no.batch = 32, no.seed = 4, no.opt.lr = 0.05f, no.tile_rows = 16, no.tile_cols = 16;
  tsr_net_t *net;
  cr_assert_eq(tsr_net_create(&net, &spec, (int)train.features, train.classes, &no, &err), 0, "%s",
               err.msg);
  tsr_train_opts_t o;
  tsr_train_opts_init(&o);
  seen_t seen = {0};
  o.epochs = 30, o.lr_schedule = TSR_LR_CONSTANT, o.on_epoch = keep, o.ctx = &seen;
  o.early_stop = 2;
  /* Without a validation set, refused. */
  cr_expect_eq(tsr_train(net, &train, NULL, &o, &err), TSR_EINVAL);
  cr_expect(strstr(err.msg, "--val-split"), "%s", err.msg);
  o.validation = &val;
  cr_assert_eq(tsr_train(net, &train, NULL, &o, &err), 0, "%s", err.msg);
  cr_assert(seen.n >= 3 && seen.n < 30, "%d epochs ran", seen.n);
  cr_expect(seen.stopped_said, "the last epoch did not say it stopped early");
  /* The rule on the losses seen: it says stop first after the last epoch that ran. */
  tsr_schedule_state_t z;
  tsr_schedule_state_init(&z);
  for (int e = 0; e < seen.n; e++)
    cr_expect_eq(tsr_early_stop_update(&z, 2, seen.val_loss[e], e + 1), e + 1 == seen.n,
                 "epoch %d of %d (validation loss %g)", e + 1, seen.n, seen.val_loss[e]);
  tsr_net_destroy(&net);
  tsr_model_spec_fini(&spec);
  tsr_dataset_fini(&train), tsr_dataset_fini(&test), tsr_dataset_fini(&val);
}
