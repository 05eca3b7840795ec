/*
 * clglow's ONNXIFI library: the core ABI of onnx/onnxifi.h plus the extension
 * types of Glow's onnxifi_ext.h (foxi), which ONNX's own onnxifi_ext.h lacks.
 *
 * A host includes <onnx/onnxifi.h> (Debian: libonnx-dev) and then this header for
 * the extension types. Without <onnx/onnxifi.h> this header declares the same
 * ABI types itself, so the library also builds where libonnx-dev is missing.
 *
 * Extensions (look them up with onnxGetExtensionFunctionAddress; Glow's names
 * with a "Function" suffix are accepted too):
 *   onnxSetIOAndRunGraph    clglowSetIOAndRunGraphFunction   (7 arguments, as Glow/foxi)
 *   onnxWaitEventFor        clglowWaitEventForFunction       (6 arguments, as Glow/PyTorch)
 *   onnxReleaseTraceEvents  clglowReleaseTraceEventsFunction
 */
#ifndef ONNXIFI_CLGLOW_H
#define ONNXIFI_CLGLOW_H 1

#include <stddef.h>
#include <stdint.h>

#if !defined(CLGLOW_NO_SYSTEM_ONNXIFI_H) && defined(__has_include)
#if __has_include(<onnx/onnxifi.h>)
#include <onnx/onnxifi.h>
#endif
#endif

#ifndef ONNXIFI_H
/* The ONNXIFI 1.0 ABI (values and layouts as in onnx/onnxifi.h). */
#define ONNXIFI_ABI
#define ONNXIFI_PUBLIC __attribute__((__visibility__("default")))
#define ONNXIFI_CHECK_RESULT __attribute__((__warn_unused_result__))
typedef void* onnxBackendID;
typedef void* onnxBackend;
typedef void* onnxGraph;
typedef void* onnxEvent;
typedef int32_t onnxStatus;
typedef uint64_t onnxEnum;
typedef uint64_t onnxBitfield;
typedef uint64_t onnxPointer;
typedef int32_t onnxBackendInfo;
typedef int32_t onnxEventState;
#define ONNXIFI_STATUS_SUCCESS 0x0000
#define ONNXIFI_STATUS_INVALID_POINTER 0x0103
#define ONNXIFI_STATUS_UNIDENTIFIED_NAME 0x0301
#define ONNXIFI_STATUS_BACKEND_UNAVAILABLE 0x0405
#define ONNXIFI_STATUS_INTERNAL_ERROR 0x0406
typedef struct onnxTensorDescriptorV1 {
  int32_t tag;
  const char* name;
  onnxEnum dataType;
  onnxEnum memoryType;
  uint32_t dimensions;
  const uint64_t* shape;
  onnxPointer buffer;
} onnxTensorDescriptorV1;
typedef struct onnxMemoryFenceV1 {
  int32_t tag;
  onnxEnum type;
  union {
    onnxEvent event;
  };
} onnxMemoryFenceV1;
#endif /* !ONNXIFI_H */

#ifndef ONNXIFI_TRACE_EVENT_NAME_SIZE
/* Same layout as Glow/foxi onnxifi_ext.h. */
#define ONNXIFI_TRACE_EVENT_NAME_SIZE 32
#define ONNXIFI_GRAPH_PROPERTY_AUTO_INSTRUMENT_NODES 1
typedef struct onnxTraceEvent {
  char eventName[ONNXIFI_TRACE_EVENT_NAME_SIZE + 1];
  char eventType; /* 'B', 'E', 'I' or 'X' */
  uint64_t timestamp; /* microseconds since the epoch */
  uint32_t tid;
  uint64_t duration; /* microseconds, for 'X' */
} onnxTraceEvent;
typedef struct onnxTraceEventList {
  uint64_t numEvents;
  onnxTraceEvent** traceEvents;
} onnxTraceEventList;
#endif

#if !defined(ONNXIFI_EXT_H)
typedef onnxStatus(ONNXIFI_ABI* onnxExtensionFunctionPointer)(void);
#endif

typedef onnxStatus(ONNXIFI_ABI* clglowGetExtensionFunctionAddressFunction)(
    onnxBackendID backendID, const char* name, onnxExtensionFunctionPointer* function);
typedef onnxStatus(ONNXIFI_ABI* clglowSetIOAndRunGraphFunction)(
    onnxGraph graph, uint32_t inputsCount, const onnxTensorDescriptorV1* inputDescriptors,
    uint32_t outputsCount, const onnxTensorDescriptorV1* outputDescriptors,
    onnxMemoryFenceV1* outputFence, onnxTraceEventList* traceEvents);
/* Waits up to timeoutMs (0: no limit). On return eventState is SIGNALLED or NONSIGNALLED;
 * eventStatus is the run's status; message (capacity *messageLength bytes, may be NULL)
 * receives the run's error message NUL-terminated, and *messageLength its full size. */
typedef onnxStatus(ONNXIFI_ABI* clglowWaitEventForFunction)(
    onnxEvent event, uint32_t timeoutMs, onnxEventState* eventState, onnxStatus* eventStatus,
    char* message, size_t* messageLength);
typedef onnxStatus(ONNXIFI_ABI* clglowReleaseTraceEventsFunction)(onnxTraceEventList* traceEvents);

#endif /* ONNXIFI_CLGLOW_H */
