/*
 * The compile options' derived values (tools/compile.h), in both builds: the build without
 * LLVM compiles nothing, but runs plans with the schedule their options give.
 */
#include "tools/compile.h" // f8_tool_optimizer, f8_tool_schedule

f8_training_options f8_tool_optimizer(const f8_tool_compile_options *compile,
				      const f8_train_config *run) {
	f8_training_options optimizer = compile->optimizer;
	optimizer.micro_batches = run->micro_batch_size > 0
					  ? run->global_batch_size / run->micro_batch_size : 0;
	if (optimizer.decay_iters == 0)
		optimizer.decay_iters = run->train_iters;
	return optimizer;
}

f8_status f8_tool_check_seq(const char *path, int64_t seq, const char *what, f8_diag *diag) {
	int64_t longest = f8_tool_described_seq(path);
	if (!longest || seq <= longest)
		return F8_OK;
	f8_diag_hint(diag, "give sequences of at most %lld tokens, or describe the model with a "
		     "longer \"seq\"", (long long)longest);
	return f8_diag_set(diag, F8_ERR_ARGUMENT, "%s is longer than the longest sequence %s "
			   "takes (\"seq\": %lld)", what, path, (long long)longest);
}

f8_train_schedule f8_tool_schedule(const f8_training_options *optimizer) {
	return (f8_train_schedule){.lr = optimizer->lr, .min_lr = optimizer->min_lr,
				   .warmup_iters = optimizer->warmup_iters,
				   .decay_iters = optimizer->decay_iters,
				   .decay_style = f8_lr_decay_name(optimizer->decay_style)};
}
