/*
 * The shard pass: the training step of one rank of a device mesh, with the collectives that
 * make its ranks compute the single-device step together (DESIGN.md, "Distributed").
 *
 * requires: canonicalize (types), training (the gradient accumulators, AdamW), fp8-cast (the
 * scaling tables whose amaxes it reduces); before recompute (which keeps collectives) and fuse.
 *
 * The mesh: Megatron-LM's sizes, innermost first, TP (--tensor-model-parallel-size), CP
 * (--context-parallel-size), EP (--expert-model-parallel-size), DP (what is left of the world
 * size), PP (--pipeline-model-parallel-size), written on the graph (graph->mesh). Megatron-LM's
 * data-parallel size is EP x DP: the dense layers' data parallelism spans both, the experts'
 * only DP. A layout the model cannot take is F8_ERR_ARGUMENT naming the numbers: the world size
 * not a product of the sizes, heads or query groups not divisible by TP, layers by PP (and the
 * virtual stages), the sequence by 2 x CP, experts by EP, EP not dividing Megatron's
 * data-parallel size, or the global batch not a multiple of micro-batch x data-parallel size.
 *
 * Tensor parallelism is split before training, by the tensor-parallel pass
 * (passes/tensor_parallel.h), which sets the mesh; here its split parameters' optimizer state
 * is placed as they are (the distributed optimizer splits each rank's TP shard further, along
 * its dim 0), and the gradient norm sums each class of split gradients' squares over the group
 * that splits them (tp, the data-parallel axes, or both), plus the whole ones'.
 *
 * Context and pipeline parallelism are split before training too, by the context- and
 * pipeline-parallel passes (passes/context_parallel.h, passes/pipeline_parallel.h), which set
 * the mesh when TP does not; the context-parallel ranks run other tokens of the same
 * sequences, so their gradients are summed with data parallelism's; a pipeline stage's
 * gradient norm class is summed over pp with the other stages' (in one order on every stage,
 * a class a stage lacks as a zero), and a parameter tied between the first and the last stage
 * (tied=pp) has its gradient summed between them at the head of phase opt.
 *
 * What each rank's program gets, so far (expert parallelism and the interleaved pipeline
 * schedule are F8_ERR_UNSUPPORTED, naming the option, until they come; --sequence-parallel
 * without TP is F8_ERR_ARGUMENT):
 *   data parallelism   each rank runs its own micro-batches of the global batch (its tokens
 *                      of them under CP); in phase opt, first, one AllReduce (sum, group
 *                      "ep+dp", "dp", "cp+dp" or "cp") of every gradient accumulator, which
 *                      the gradient norm and AdamW read instead: the training pass averages
 *                      over the global batch's micro-batches already (and the loss under CP
 *                      over the cp ranks' tokens), so the sum of the ranks' accumulators is
 *                      the single-device step's.
 *   FP8 amaxes         before each ScalingUpdate, one AllReduce (max) of the table's amaxes
 *                      over the group of every axis above one rank but PP (TransformerEngine's
 *                      amax reduction group: TP x CP x DP), packed into one collective per
 *                      table and phase: every rank's scales of a tensor are the same bits.
 */
#ifndef F8_PASSES_SHARD_H
#define F8_PASSES_SHARD_H

#include <stdbool.h> // bool
#include <stdint.h>  // int64_t, uint32_t
#include <stdio.h>   // FILE

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph, F8_MESH_AXIS_COUNT

/* Megatron-LM's parallel options. A zeroed struct is one rank. */
typedef struct f8_parallel_options {
	int64_t world;                 // --world-size, or the launcher's; 0: 1
	int64_t tensor;                // --tensor-model-parallel-size; 0: 1
	int64_t pipeline;              // --pipeline-model-parallel-size; 0: 1
	int64_t context;               // --context-parallel-size; 0: 1
	int64_t expert;                // --expert-model-parallel-size; 0: 1
	int64_t virtual_stage_layers;  // --num-layers-per-virtual-pipeline-stage; 0: none
	int64_t stage;                 // the pipeline stage whose program this is (0-based): the
				       // launcher's rank's under train, --pipeline-stage else
	bool sequence_parallel;        // --sequence-parallel
	bool distributed_optimizer;    // --use-distributed-optimizer
	int64_t micro_batch, global_batch; // the run's sizes, for the batch check (0: unchecked)
} f8_parallel_options;

/* The mesh of `options` into mesh[F8_MESH_AXIS_COUNT] (sizes >= 1): DP is the world size over
 * TP x CP x EP x PP. F8_ERR_ARGUMENT naming the numbers when the world size is not a multiple of
 * their product, or a size is below 1. */
f8_status f8_parallel_mesh(const f8_parallel_options *options, uint32_t *mesh, f8_diag *diag);

/* f8_parallel_mesh, then the layout checked against the model in `graph` as the header says;
 * the tensor-parallel pass checks it so too, before training. */
f8_status f8_parallel_check(const f8_graph *graph, const f8_parallel_options *options,
			    uint32_t *mesh, f8_diag *diag);

/*
 * For a pass that splits the forward before training, `pass` ("context-parallel"): the mesh
 * into mesh[], checked against the whole model by f8_parallel_check when no earlier pass set
 * graph->mesh, else f8_parallel_mesh's, which must be the graph's. F8_ERR_INVALID for a graph
 * with a backward or another mesh; f8_parallel_check's errors.
 */
f8_status f8_parallel_forward_mesh(const f8_graph *graph, const f8_parallel_options *options,
				   const char *pass, uint32_t *mesh, f8_diag *diag);

/* Whether `options` asks for more than one rank. */
bool f8_parallel_options_any(const f8_parallel_options *options);

/*
 * Runs the pass over `graph` (nothing for one rank) as above: checks the layout against the
 * model, sets graph->mesh and inserts the collectives. A line per kind of collective, with its
 * count and bytes per step, to `report` when not NULL. F8_ERR_ARGUMENT for a layout the model
 * cannot take, F8_ERR_UNSUPPORTED for a parallelism not built yet, F8_ERR_INVALID for a graph
 * sharded already or without a backward, F8_ERR_NOMEM.
 */
f8_status f8_pass_shard_run(f8_graph *graph, const f8_parallel_options *options, FILE *report,
			    f8_diag *diag);

#endif
