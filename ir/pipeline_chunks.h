/*
 * Pipeline parallelism's model chunks in one stage's program (the interleaved schedule,
 * --num-layers-per-virtual-pipeline-stage): which chunk each forward and backward node belongs
 * to, so that a chunk's forward or backward of one micro-batch runs on its own
 * (runtime/executor.h, F8_RUN_CHUNK) in the order runtime/pipeline_schedule.h gives.
 *
 * A stage holds chunks v = 0 .. V - 1, the pipeline's (v PP + s)-th, whose layers are runs of
 * consecutive layer numbers separated by the other stages' (the pipeline-parallel pass's cut):
 * the chunk of a node with a layer's scope is the run its layer is in. The others take theirs
 * from the values they read, in the order a micro-batch's runs go (its forwards in increasing
 * chunk order, then its backwards in decreasing order, every forward before any backward):
 *   - a forward node, the latest chunk of what it reads (the head and the loss: the last
 *     chunk's); a backward node, the latest run of what the backward made that it reads (the
 *     lowest chunk), or else of what it reads of the forward (the highest);
 *   - a node that reads no chunk's value (the embeddings, a constant, the seed of a backward, a
 *     Recv) runs in the earliest run that reads it: a forward node in the lowest chunk of its
 *     forward readers, a backward node in the highest of its backward readers (chunk 0 for
 *     forward nodes and backward nodes that none reads).
 * Nodes of other phases (cast, opt) run once per step, apart from the chunks: their chunk is 0.
 * A program without a pipeline (graph->mesh's pp at most 1) has one chunk.
 */
#ifndef F8_IR_PIPELINE_CHUNKS_H
#define F8_IR_PIPELINE_CHUNKS_H

#include <stdbool.h> // bool
#include <stdint.h>  // uint8_t, uint32_t

#include "ir/diag.h"  // f8_status, f8_diag
#include "ir/graph.h" // f8_graph

/* The most model chunks a stage holds. */
#define F8_PIPELINE_CHUNKS_MAX 64

/*
 * Each node's chunk into chunk[] (graph->n_nodes entries, the caller's; nodes outside the
 * program get 0) and their number into *n_chunks (1: the program is not interleaved, every
 * node's chunk is 0). F8_ERR_INVALID, naming the node and the value, when a node would read a
 * value that its micro-batch's runs make only after its own (a program cut wrong);
 * F8_ERR_UNSUPPORTED past F8_PIPELINE_CHUNKS_MAX chunks; F8_ERR_NOMEM.
 */
f8_status f8_pipeline_chunks(const f8_graph *graph, uint8_t *chunk, uint32_t *n_chunks,
			     f8_diag *diag);

/*
 * Lays the program out run by run under the interleaved schedule: the forward's nodes chunk by
 * chunk, then the backward's from the last chunk to the first, each chunk's in their order,
 * the nodes of the other phases where they stand. Nothing when the program is not
 * interleaved. The slab plan's lifetimes (the schedule pass) follow the program's order, and a
 * fused kernel is a run of neighbours: both then follow the runs. f8_pipeline_chunks's errors.
 */
f8_status f8_pipeline_order_chunks(f8_graph *graph, f8_diag *diag);

/* Whether nodes of `phase` run by chunks (the forward and the backward; cast and opt run once
 * a step). */
static inline bool f8_pipeline_chunked(f8_phase phase) {
	return phase == F8_PHASE_FWD || phase == F8_PHASE_BWD;
}

/* Where a node of `phase` in chunk `chunk` of `n_chunks` runs in its micro-batch's order of
 * runs: forwards 0 .. n - 1, then backwards n .. 2 n - 1 (chunk n - 1's first). */
static inline uint32_t f8_pipeline_chunk_run(f8_phase phase, uint32_t chunk, uint32_t n_chunks) {
	return phase == F8_PHASE_BWD ? 2 * n_chunks - 1 - chunk : chunk;
}

#endif
