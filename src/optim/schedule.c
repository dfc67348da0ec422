/* Learning-rate schedules. */
#include <math.h>

#include "optim/optim.h"

double tsr__lr_at(tsr_lr_schedule_t schedule, double base, int64_t t, int64_t total) {
  if (schedule != TSR_LR_COSINE || total <= 0) return base;
  double progress = (double)t / (double)total;
  return base * 0.5 * (1.0 + cos(M_PI * progress));
}
