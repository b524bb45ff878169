/*
 * Reverse-mode automatic differentiation of an IR graph: appends to the program the nodes that
 * compute the gradient of a scalar with respect to chosen values, from one gradient rule per op
 * (passes/gradients.h). The training pass uses it for the loss and the parameters; the gradient
 * check (tests/runtime/) uses it for any op.
 */
#ifndef F8_PASSES_AUTODIFF_H
#define F8_PASSES_AUTODIFF_H

#include <stdint.h> // uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, f8_value_id

/*
 * Appends the backward program of `graph` (types inferred, verified) for the scalar float value
 * `loss`: the gradient of `loss` with respect to each of wrt[0..n_wrt) goes into grads[i]
 * (a value of wrt[i]'s type; F8_NONE when loss does not depend on it). The seed d(loss)/d(loss)
 * is `seed` when it is not F8_NONE (a scalar of loss's type, such as a Constant or an input),
 * else a Constant 1. New nodes get phase `phase` (bwd for training), the scope of the forward
 * node they differentiate, and names `<value>.grad` (gradients of a value summed over its uses)
 * or derived from them. A forward node whose rule needs an output it was not asked for (the
 * statistics of a norm, the log-sum-exp of an attention) gets that output added.
 * An op on the path from a wrt value to `loss` without a gradient rule fails with
 * F8_ERR_UNSUPPORTED naming the node; so does a non-float value on that path.
 */
f8_status f8_autodiff_build(f8_graph *graph, f8_value_id loss, f8_value_id seed,
			    const f8_value_id *wrt, uint32_t n_wrt, f8_phase phase,
			    f8_value_id *grads, f8_diag *diag);

#endif
