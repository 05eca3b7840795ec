/*
 * The seam between libonnxifi-clglow.so's C (onnxifi_clglow.c) and its Python
 * (onnxifi/_cbridge.py). Private to the library: hosts include onnxifi_clglow.h.
 *
 * onnxifi/_build.py reads the function declarations of this file and hands them
 * to cffi, so each is written once, here:
 *   - clglow_py_* are implemented in Python (cffi `extern "Python"`, registered by
 *     _cbridge.install with @ffi.def_extern); cffi generates their C definitions,
 *     which start the embedded interpreter on the first call. They go to cffi's
 *     embedding_api.
 *   - the other functions are implemented in onnxifi_clglow.c and called from
 *     Python through cffi's `lib`. They go to cffi's cdef.
 * Keep one declaration per statement, without macros or attributes: cffi's
 * parser sees this text without a preprocessor.
 *
 * The clglow_py_* functions take the C arguments unchanged, except
 * clglow_py_onnxGetExtensionFunctionAddress, which only learns whether the
 * caller passed somewhere to store the function (the pointer is C's business:
 * Python cannot make a C function pointer that outlives it).
 */
#ifndef ONNXIFI_CLGLOW_BRIDGE_H
#define ONNXIFI_CLGLOW_BRIDGE_H 1

#include "onnxifi_clglow.h"

/* --- Implemented in Python (onnxifi/_cbridge.py): the 15 core functions ------------------ */
onnxStatus clglow_py_onnxGetBackendIDs(onnxBackendID* backendIDs, size_t* numBackends);
onnxStatus clglow_py_onnxReleaseBackendID(onnxBackendID backendID);
onnxStatus clglow_py_onnxGetBackendInfo(onnxBackendID backendID, onnxBackendInfo infoType, void* infoValue,
                                        size_t* infoValueSize);
onnxStatus clglow_py_onnxGetBackendCompatibility(onnxBackendID backendID, size_t onnxModelSize,
                                                 const void* onnxModel);
onnxStatus clglow_py_onnxInitBackend(onnxBackendID backendID, const uint64_t* auxPropertiesList,
                                     onnxBackend* backend);
onnxStatus clglow_py_onnxReleaseBackend(onnxBackend backend);
onnxStatus clglow_py_onnxInitEvent(onnxBackend backend, onnxEvent* event);
onnxStatus clglow_py_onnxSignalEvent(onnxEvent event);
onnxStatus clglow_py_onnxGetEventState(onnxEvent event, onnxEventState* state);
onnxStatus clglow_py_onnxWaitEvent(onnxEvent event);
onnxStatus clglow_py_onnxReleaseEvent(onnxEvent event);
onnxStatus clglow_py_onnxInitGraph(onnxBackend backend, const uint64_t* auxPropertiesList, size_t onnxModelSize,
                                   const void* onnxModel, uint32_t weightsCount,
                                   const onnxTensorDescriptorV1* weightDescriptors, onnxGraph* graph);
onnxStatus clglow_py_onnxSetGraphIO(onnxGraph graph, uint32_t inputsCount,
                                    const onnxTensorDescriptorV1* inputDescriptors, uint32_t outputsCount,
                                    const onnxTensorDescriptorV1* outputDescriptors);
onnxStatus clglow_py_onnxRunGraph(onnxGraph graph, const onnxMemoryFenceV1* inputFence,
                                  onnxMemoryFenceV1* outputFence);
onnxStatus clglow_py_onnxReleaseGraph(onnxGraph graph);

/* --- Implemented in Python: the extensions and the name check of onnxGetExtensionFunctionAddress */
onnxStatus clglow_py_onnxSetIOAndRunGraph(onnxGraph graph, uint32_t inputsCount,
                                          const onnxTensorDescriptorV1* inputDescriptors, uint32_t outputsCount,
                                          const onnxTensorDescriptorV1* outputDescriptors,
                                          onnxMemoryFenceV1* outputFence, onnxTraceEventList* traceEvents);
onnxStatus clglow_py_onnxWaitEventFor(onnxEvent event, uint32_t timeoutMs, onnxEventState* eventState,
                                      onnxStatus* eventStatus, char* message, size_t* messageLength);
onnxStatus clglow_py_onnxGetExtensionFunctionAddress(onnxBackendID backendID, const char* name, int hasFunction);

/* --- Implemented in onnxifi_clglow.c, called from Python ---------------------------------- */
/* Allocates n zeroed trace events into *list (the host frees them with onnxReleaseTraceEvents);
 * returns 0 when out of memory, leaving *list empty. */
int clglow_trace_alloc(onnxTraceEventList* list, uint64_t n);
/* Frees what clglow_trace_alloc allocated and empties *list. */
void clglow_trace_free(onnxTraceEventList* list);
/* The last step of the embedded interpreter's start: from now on statuses come from Python. */
void clglow_mark_ready(void);

#endif /* ONNXIFI_CLGLOW_BRIDGE_H */
