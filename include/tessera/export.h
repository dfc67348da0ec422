/* Symbol visibility for the public API: the library is built with hidden
 * visibility, and only what carries TSR_API is exported. */
#ifndef TESSERA_EXPORT_H
#define TESSERA_EXPORT_H

#if defined(TSR_BUILDING) && defined(__GNUC__)
#define TSR_API __attribute__((visibility("default")))
#else
#define TSR_API
#endif

/* Declarations between these have C linkage for C++ callers. */
#ifdef __cplusplus
#define TSR_EXTERN_C_BEGIN extern "C" {
#define TSR_EXTERN_C_END }
#else
#define TSR_EXTERN_C_BEGIN
#define TSR_EXTERN_C_END
#endif

#endif
