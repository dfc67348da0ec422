/* TSR_TRY: return a non-zero code from the enclosing function. Used where a
 * sequence of submissions stops at the first refusal. */
#ifndef TSR_TRY_H
#define TSR_TRY_H

#define TSR_TRY(call)                                                                              \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != 0) return rc_;                                                                      \
  } while (0)

#endif
