/*!
 * mxhorovod C API: collectives on MXNet NDArrays through MXNet's dependency engine.
 *
 * Each call validates its arguments, describes the operation and pushes ONE asynchronous
 * engine operation (MXEnginePushAsyncND) that reads `input` and writes `output` (an
 * in-place call, input == output, declares the array as a write dependency only). The
 * call returns at once; the engine runs the operation after the last writer of the input,
 * and every later reader of the output waits for its completion. An error found after the
 * call (a mismatch between ranks, a peer that shut down) is raised by MXNet at the next
 * wait on the output (asnumpy, wait_to_read, waitall) on that rank.
 *
 * Every function returns 0 on success, -1 on failure at the call, and -2 when the
 * collective ran and failed (under MXNet's NaiveEngine only, which runs it inside the
 * call and would drop the error); MXHorovodGetLastError() then
 * returns the message for this thread. Only CPU NDArrays with default storage and dtype
 * float16, float32, float64, uint8, int8, int32 or int64 are accepted.
 */
#ifndef MXHOROVOD_C_API_H_
#define MXHOROVOD_C_API_H_

#include <stdint.h>

/*! \brief Exported from the extension module although pybind11 builds it with hidden
 *  symbols: other code (ctypes, another extension) calls these by name. */
#if defined(__GNUC__)
#define MXHOROVOD_API __attribute__((visibility("default")))
#else
#define MXHOROVOD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/*! \brief an MXNet NDArrayHandle */
typedef void* MXHNDArrayHandle;

/*! \brief Reduce ops, numbered as horovod.common: Average 0, Sum 1, Adasum 2, Min 3, Max 4, Product 5. */
enum MXHorovodReduceOp {
  MXHOROVOD_AVERAGE = 0, MXHOROVOD_SUM = 1, MXHOROVOD_ADASUM = 2,
  MXHOROVOD_MIN = 3, MXHOROVOD_MAX = 4, MXHOROVOD_PRODUCT = 5
};

/*! \brief The message of the last failed call on this thread. */
MXHOROVOD_API const char* MXHorovodGetLastError(void);

/*
 * Every collective takes process_set_id: 0 for the global set (every rank), or the id of a
 * set registered with hvd.add_process_set / init(process_sets=...). The collective is
 * negotiated and run among that set's ranks only; "rank" and "size" below are the set's,
 * and a rank outside the set gets an error at the call.
 */

/*!
 * \brief output = op over ranks of (prescale * input), then * postscale (Average: / size).
 * input and output: same shape and dtype on every rank.
 */
MXHOROVOD_API int MXWaitforHorovodAllreduce(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int reduce_op, double prescale_factor, double postscale_factor,
                              int priority, int process_set_id);

/*!
 * \brief num tensors in one engine operation; names[i] names inputs[i]. Arrays must be
 * distinct. Outputs may equal their inputs (in place).
 */
MXHOROVOD_API int MXWaitforHorovodGroupedAllreduce(MXHNDArrayHandle* inputs, MXHNDArrayHandle* outputs, int num,
                                     const char** names, int reduce_op, double prescale_factor,
                                     double postscale_factor, int priority, int process_set_id);

/*!
 * \brief Rank r's output = rows [first_r, first_r + rows_r) of op over ranks of
 * (prescale * input), then * postscale (Average: / size), where dimension 0 (n rows) is
 * split evenly and the lower ranks take one extra row each while n % size lasts:
 * rows_r = n / size + (r < n % size). Sum and Average only; input has >= 1 dimension and
 * the same shape on every rank; output has shape (rows_r, *input.shape[1:]); not in place.
 */
MXHOROVOD_API int MXWaitforHorovodReducescatter(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                                  int reduce_op, double prescale_factor, double postscale_factor,
                                  int priority, int process_set_id);

/*! \brief num reducescatters in one engine operation, reduced in one fused call. */
MXHOROVOD_API int MXWaitforHorovodGroupedReducescatter(MXHNDArrayHandle* inputs, MXHNDArrayHandle* outputs,
                                         int num, const char** names, int reduce_op,
                                         double prescale_factor, double postscale_factor,
                                         int priority, int process_set_id);

/*!
 * \brief output on every rank = input of root_rank (a rank of the set). Same shape and
 * dtype on every rank.
 */
MXHOROVOD_API int MXWaitforHorovodBroadcast(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int root_rank, int priority, int process_set_id);

/*!
 * \brief output = concatenation over ranks (in rank order) of input along dimension 0.
 * Dimension 0 may differ per rank; output must already have the total number of rows.
 */
MXHOROVOD_API int MXWaitforHorovodAllgather(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int priority, int process_set_id);

/*! \brief num allgathers in one engine operation. */
MXHOROVOD_API int MXWaitforHorovodGroupedAllgather(MXHNDArrayHandle* inputs, MXHNDArrayHandle* outputs, int num,
                                     const char** names, int priority, int process_set_id);

/*!
 * \brief Rows [sum(splits[:r]), sum(splits[:r+1])) of input go to rank r; output receives
 * recv_splits[r] rows from rank r, in rank order. splits and recv_splits have size entries.
 */
MXHOROVOD_API int MXWaitforHorovodAlltoall(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                             const int64_t* splits, const int64_t* recv_splits, int num_splits,
                             int priority, int process_set_id);

#ifdef __cplusplus
}
#endif

#endif  /* MXHOROVOD_C_API_H_ */
