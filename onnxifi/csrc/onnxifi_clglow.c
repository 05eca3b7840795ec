/*
 * libonnxifi-clglow.so: the ONNXIFI 1.0 C ABI over clglow's Python ONNXIFI module.
 *
 * The library exports the 15 core functions of onnx/onnxifi.h and
 * onnxGetExtensionFunctionAddress (a linker version script hides every other
 * symbol). Each export forwards to a clglow_py_* function that cffi's embedding
 * mode generates: its first call starts a Python interpreter (or joins the one
 * the host already runs), runs the init code of onnxifi/_build.py and then calls
 * the Python function registered by onnxifi/_cbridge.py, which calls onnxifi.api.
 * Every status comes from Python, except the few this file decides itself:
 * BACKEND_UNAVAILABLE when the interpreter could not start, and the answers of the
 * extension lookup, which needs C function pointers.
 *
 * Built by onnxifi/_build.py (python -m onnxifi --build), which keeps this file,
 * cffi's generated glue (_onnxifi_clglow.c), the objects and the library together
 * in one build folder (python -m onnxifi --build-dir), compiled with -g, so that a
 * debugger attached to a host finds the source of every frame of this file.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* The real headers when installed (Debian: libonnx-dev), so the compiler checks every
 * definition below against onnxifi.h's prototype and onnxifi_ext.h's declaration of
 * onnxGetExtensionFunctionAddress; onnxifi_clglow.h declares the same ABI otherwise. */
#if !defined(CLGLOW_NO_SYSTEM_ONNXIFI_H) && defined(__has_include)
#if __has_include(<onnx/onnxifi_ext.h>)
#include <onnx/onnxifi_ext.h>
#endif
#endif
#include "onnxifi_clglow_bridge.h"

/* --- Start-up ------------------------------------------------------------------------------ */

/* Set by the last line of the embedded interpreter's init code (clglow_mark_ready). When that
 * code fails, cffi prints the traceback and every clglow_py_* call returns 0, which would read as
 * ONNXIFI_STATUS_SUCCESS with nothing written to the out-parameters: the exports below check the
 * flag after each call and answer BACKEND_UNAVAILABLE instead. Written once, read by any thread. */
static int clglow_ready = 0;

void clglow_mark_ready(void) { __atomic_store_n(&clglow_ready, 1, __ATOMIC_RELEASE); }

static onnxStatus clglow_checked(onnxStatus status) {
  return __atomic_load_n(&clglow_ready, __ATOMIC_ACQUIRE) ? status : ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
}

#ifdef CLGLOW_LIBPYTHON_SONAME
/* Hosts dlopen() this library with RTLD_LOCAL (ONNX's onnxifi_load does), which keeps libpython's
 * symbols out of the global scope; the extension modules the embedded interpreter imports (numpy,
 * pyopencl, ...) are not linked against libpython and would fail to load. Promote libpython to
 * RTLD_GLOBAL before anything else runs. _build.py defines the soname of the building Python. */
__attribute__((constructor)) static void clglow_promote_libpython(void) {
  if (!dlopen(CLGLOW_LIBPYTHON_SONAME, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD))
    dlopen(CLGLOW_LIBPYTHON_SONAME, RTLD_NOW | RTLD_GLOBAL);
}
#endif

/* --- The 15 core functions (onnxifi.h): Python's status, once the interpreter is up ---------- */

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetBackendIDs(onnxBackendID* backendIDs, size_t* numBackends) {
  return clglow_checked(clglow_py_onnxGetBackendIDs(backendIDs, numBackends));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseBackendID(onnxBackendID backendID) {
  return clglow_checked(clglow_py_onnxReleaseBackendID(backendID));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetBackendInfo(onnxBackendID backendID, onnxBackendInfo infoType,
                                                         void* infoValue, size_t* infoValueSize) {
  return clglow_checked(clglow_py_onnxGetBackendInfo(backendID, infoType, infoValue, infoValueSize));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetBackendCompatibility(onnxBackendID backendID, size_t onnxModelSize,
                                                                  const void* onnxModel) {
  return clglow_checked(clglow_py_onnxGetBackendCompatibility(backendID, onnxModelSize, onnxModel));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxInitBackend(onnxBackendID backendID, const uint64_t* auxPropertiesList,
                                                      onnxBackend* backend) {
  return clglow_checked(clglow_py_onnxInitBackend(backendID, auxPropertiesList, backend));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseBackend(onnxBackend backend) {
  return clglow_checked(clglow_py_onnxReleaseBackend(backend));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxInitEvent(onnxBackend backend, onnxEvent* event) {
  return clglow_checked(clglow_py_onnxInitEvent(backend, event));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxSignalEvent(onnxEvent event) {
  return clglow_checked(clglow_py_onnxSignalEvent(event));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetEventState(onnxEvent event, onnxEventState* state) {
  return clglow_checked(clglow_py_onnxGetEventState(event, state));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxWaitEvent(onnxEvent event) {
  return clglow_checked(clglow_py_onnxWaitEvent(event));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseEvent(onnxEvent event) {
  return clglow_checked(clglow_py_onnxReleaseEvent(event));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxInitGraph(onnxBackend backend, const uint64_t* auxPropertiesList,
                                                    size_t onnxModelSize, const void* onnxModel,
                                                    uint32_t weightsCount,
                                                    const onnxTensorDescriptorV1* weightDescriptors,
                                                    onnxGraph* graph) {
  return clglow_checked(clglow_py_onnxInitGraph(backend, auxPropertiesList, onnxModelSize, onnxModel, weightsCount,
                                                weightDescriptors, graph));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxSetGraphIO(onnxGraph graph, uint32_t inputsCount,
                                                     const onnxTensorDescriptorV1* inputDescriptors,
                                                     uint32_t outputsCount,
                                                     const onnxTensorDescriptorV1* outputDescriptors) {
  return clglow_checked(
      clglow_py_onnxSetGraphIO(graph, inputsCount, inputDescriptors, outputsCount, outputDescriptors));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxRunGraph(onnxGraph graph, const onnxMemoryFenceV1* inputFence,
                                                   onnxMemoryFenceV1* outputFence) {
  return clglow_checked(clglow_py_onnxRunGraph(graph, inputFence, outputFence));
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseGraph(onnxGraph graph) {
  return clglow_checked(clglow_py_onnxReleaseGraph(graph));
}

/* --- Trace events (onnxSetIOAndRunGraph's traceEvents) ------------------------------------- */

/* The host owns the events after the run and frees them with onnxReleaseTraceEvents, so they are
 * malloc'ed here, one block per event as Glow lays them out (an array of pointers), never by
 * Python's allocator. */
int clglow_trace_alloc(onnxTraceEventList* list, uint64_t n) {
  list->numEvents = 0;
  list->traceEvents = NULL;
  if (n == 0) return 1;
  onnxTraceEvent** events = (onnxTraceEvent**)calloc((size_t)n, sizeof(onnxTraceEvent*));
  if (!events) return 0;
  for (uint64_t i = 0; i < n; i++) {
    events[i] = (onnxTraceEvent*)calloc(1, sizeof(onnxTraceEvent));
    if (!events[i]) {
      for (uint64_t j = 0; j < i; j++) free(events[j]);
      free(events);
      return 0;
    }
  }
  list->traceEvents = events;
  list->numEvents = n;
  return 1;
}

void clglow_trace_free(onnxTraceEventList* list) {
  if (list->traceEvents) {
    for (uint64_t i = 0; i < list->numEvents; i++) free(list->traceEvents[i]);
    free(list->traceEvents);
  }
  list->traceEvents = NULL;
  list->numEvents = 0;
}

/* --- Extensions, reached through onnxGetExtensionFunctionAddress only (not exported) ---------- */

static onnxStatus ONNXIFI_ABI clglow_ext_onnxSetIOAndRunGraph(onnxGraph graph, uint32_t inputsCount,
                                                              const onnxTensorDescriptorV1* inputDescriptors,
                                                              uint32_t outputsCount,
                                                              const onnxTensorDescriptorV1* outputDescriptors,
                                                              onnxMemoryFenceV1* outputFence,
                                                              onnxTraceEventList* traceEvents) {
  return clglow_py_onnxSetIOAndRunGraph(graph, inputsCount, inputDescriptors, outputsCount, outputDescriptors,
                                        outputFence, traceEvents);
}

static onnxStatus ONNXIFI_ABI clglow_ext_onnxWaitEventFor(onnxEvent event, uint32_t timeoutMs,
                                                          onnxEventState* eventState, onnxStatus* eventStatus,
                                                          char* message, size_t* messageLength) {
  return clglow_py_onnxWaitEventFor(event, timeoutMs, eventState, eventStatus, message, messageLength);
}

static onnxStatus ONNXIFI_ABI clglow_ext_onnxReleaseTraceEvents(onnxTraceEventList* traceEvents) {
  if (!traceEvents) return ONNXIFI_STATUS_INVALID_POINTER;
  clglow_trace_free(traceEvents);
  return ONNXIFI_STATUS_SUCCESS;
}

/* The signatures hosts cast the looked-up pointers to (onnxifi_clglow.h): a mismatch with the
 * definitions above is a compile error here rather than a crash in the host. */
static const clglowSetIOAndRunGraphFunction clglow_check_set_io_and_run = clglow_ext_onnxSetIOAndRunGraph;
static const clglowWaitEventForFunction clglow_check_wait_event_for = clglow_ext_onnxWaitEventFor;
static const clglowReleaseTraceEventsFunction clglow_check_release_trace = clglow_ext_onnxReleaseTraceEvents;

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetExtensionFunctionAddress(onnxBackendID backendID, const char* name,
                                                                      onnxExtensionFunctionPointer* function);

/* Our function for an extension name. Glow's names end in "Function" (onnxSetIOAndRunGraphFunction):
 * both spellings are accepted. */
static onnxExtensionFunctionPointer clglow_ext_lookup(const char* name) {
  size_t n = strlen(name);
  const size_t suffix = sizeof("Function") - 1;
  if (n > suffix && strcmp(name + n - suffix, "Function") == 0 &&
      strcmp(name, "onnxGetExtensionFunctionAddress") != 0)
    n -= suffix;
  static const struct {
    const char* name;
    onnxExtensionFunctionPointer function;
  } table[] = {
      {"onnxGetExtensionFunctionAddress", (onnxExtensionFunctionPointer)onnxGetExtensionFunctionAddress},
      {"onnxSetIOAndRunGraph", (onnxExtensionFunctionPointer)clglow_check_set_io_and_run},
      {"onnxWaitEventFor", (onnxExtensionFunctionPointer)clglow_check_wait_event_for},
      {"onnxReleaseTraceEvents", (onnxExtensionFunctionPointer)clglow_check_release_trace},
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strlen(table[i].name) == n && strncmp(name, table[i].name, n) == 0) return table[i].function;
  return NULL;
}

/* Python validates the backend ID and the name (and says which extensions the backend lists);
 * only then is the C function pointer handed out. */
ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetExtensionFunctionAddress(onnxBackendID backendID, const char* name,
                                                                      onnxExtensionFunctionPointer* function) {
  if (function) *function = NULL;
  onnxStatus status = clglow_checked(clglow_py_onnxGetExtensionFunctionAddress(backendID, name, function != NULL));
  if (status != ONNXIFI_STATUS_SUCCESS) return status;
  onnxExtensionFunctionPointer found = clglow_ext_lookup(name);
  if (!found) return ONNXIFI_STATUS_UNIDENTIFIED_NAME;
  *function = found;
  return ONNXIFI_STATUS_SUCCESS;
}
