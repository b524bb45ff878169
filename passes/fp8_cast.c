/*
 * The fp8-cast pass (passes/fp8_cast.h).
 */
#include "passes/fp8_cast.h" // f8_pass_fp8_cast_run

f8_status f8_pass_fp8_cast_run(f8_graph *graph, const f8_fp8_options *options, FILE *report,
			       f8_diag *diag) {
	(void)graph, (void)options, (void)report, (void)diag;
	return F8_OK;
}
