/* TSR_HOT: a kernel compiled for several x86-64 levels (AVX-512, AVX2 and FMA, the baseline),
 * the one for this CPU chosen when the library loads (GCC's and Clang's target_clones, an ifunc),
 * as BLIS and oneDNN choose theirs. Defined in the portable build (meson's -Dmarch=portable, the
 * default); with -Dmarch=native or another level the whole library is compiled for it and
 * TSR_HOT is nothing. Put it on the functions whose loops the compiler vectorizes, and on the
 * static helpers they call that are not inlined. GCC only: Clang 14 emits a multiversioned
 * function's resolver only in a file that calls it, so the library's other files link against
 * nothing (tsr__k_adamw undefined in the fuzz build); a Clang build has the baseline versions. */
#ifndef TSR_KERNELS_HOT_H
#define TSR_KERNELS_HOT_H

#if defined(TSR_PORTABLE) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TSR_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
/* A hot kernel that must not be inlined: its versions are called through the resolver, never
 * inlined, and Clang refuses noinline beside target_clones. */
#define TSR_HOT_NOINLINE TSR_HOT
#else
#define TSR_HOT
#define TSR_HOT_NOINLINE __attribute__((noinline))
#endif

#endif
