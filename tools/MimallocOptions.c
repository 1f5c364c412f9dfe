/*===- MimallocOptions.c - mimalloc's options for the compiler's tools ----===*
 *
 * Linked into each tool that links mimalloc (mfsdp_link_mimalloc). Pages a
 * tool frees are decommitted at once rather than after mimalloc's delay
 * (25 ms in 2.0; the purge delay of 2.1 and later): the pipeline frees
 * large arrays (the step's ops as they are written, a graph's planning
 * problem) just before it allocates as much again, and with the delay both
 * count in the peak. On the 100,000-unit
 * graph this lowers the peak by about 0.5 GiB at the same time
 * (docs/benchmarks.md, "Eighth round"). It overrides the MIMALLOC_*
 * environment setting of the same option.
 *
 * Once a tool's large arrays are behind it, mfsdpMimallocSettled gives the
 * delay back (100 ms): printing the result allocates and frees a few small
 * temporaries per operation, and with no delay a page that empties between
 * two of them is decommitted and faulted in again. On the 100,000-unit
 * graph that came to 2 million page faults and 5 s of system time in
 * printing alone (docs/benchmarks.md, "Twenty-first round").
 *
 *===----------------------------------------------------------------------===*/
#include <mimalloc.h>

__attribute__((constructor)) static void mfsdpMimallocOptions(void) {
#if MI_MALLOC_VERSION >= 210
  mi_option_set(mi_option_purge_delay, 0);
#else
  mi_option_set(mi_option_decommit_delay, 0);
#endif
}

void mfsdpMimallocSettled(void) {
#if MI_MALLOC_VERSION >= 210
  mi_option_set(mi_option_purge_delay, 100);
#else
  mi_option_set(mi_option_decommit_delay, 100);
#endif
}
