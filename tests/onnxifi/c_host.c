/*
 * A C host with no Python of its own: dlopen()s the ONNXIFI library, enumerates backends,
 * reads their info, checks compatibility, initialises a graph with weight descriptors,
 * sets IO, runs with events (input written after onnxRunGraph returned), checks the
 * outputs against a reference, uses the extensions and releases everything.
 *
 * usage: c_host LIBRARY CASE_DIR [ATOL]
 * CASE_DIR/model.onnx and CASE_DIR/tensors.txt, one tensor a line:
 *   ROLE NAME DATATYPE NDIM D0 .. DN-1 FILE       (ROLE: weight | input | output; FILE: raw bytes)
 * Prints "PASS" and exits 0 on success.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <onnx/onnxifi.h>
#include "onnxifi_clglow.h"

#define MAX_TENSORS 64
#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, "\n");                               \
      exit(1);                                             \
    }                                                      \
  } while (0)
#define EXPECT(call, want)                                                                  \
  do {                                                                                      \
    onnxStatus s_ = (call);                                                                 \
    CHECK(s_ == (want), "%s returned 0x%x, expected 0x%x", #call, (unsigned)s_, (unsigned)(want)); \
  } while (0)

typedef struct {
  char role[16], name[256], file[512];
  uint64_t dataType;
  uint32_t ndim;
  uint64_t dims[8];
  void* data;
  size_t nbytes;
} Tensor;

static struct {
  onnxGetBackendIDsFunction GetBackendIDs;
  onnxReleaseBackendIDFunction ReleaseBackendID;
  onnxGetBackendInfoFunction GetBackendInfo;
  onnxGetBackendCompatibilityFunction GetBackendCompatibility;
  onnxInitBackendFunction InitBackend;
  onnxReleaseBackendFunction ReleaseBackend;
  onnxInitEventFunction InitEvent;
  onnxSignalEventFunction SignalEvent;
  onnxGetEventStateFunction GetEventState;
  onnxWaitEventFunction WaitEvent;
  onnxReleaseEventFunction ReleaseEvent;
  onnxInitGraphFunction InitGraph;
  onnxSetGraphIOFunction SetGraphIO;
  onnxRunGraphFunction RunGraph;
  onnxReleaseGraphFunction ReleaseGraph;
  clglowGetExtensionFunctionAddressFunction GetExtensionFunctionAddress;
} L;

static void* sym(void* h, const char* name) {
  void* p = dlsym(h, name);
  CHECK(p != NULL, "missing symbol %s", name);
  return p;
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  CHECK(f != NULL, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* buf = malloc(n > 0 ? (size_t)n : 1);
  CHECK(fread(buf, 1, (size_t)n, f) == (size_t)n, "short read %s", path);
  fclose(f);
  *size = (size_t)n;
  return buf;
}

static onnxTensorDescriptorV1 desc(const Tensor* t, void* buffer) {
  onnxTensorDescriptorV1 d;
  d.tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
  d.name = t->name;
  d.dataType = t->dataType;
  d.memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  d.dimensions = t->ndim;
  d.shape = t->dims;
  d.buffer = (onnxPointer)(uintptr_t)buffer;
  return d;
}

static int compare(const Tensor* want, const void* got, double atol) {
  if (want->dataType != ONNXIFI_DATATYPE_FLOAT32) return memcmp(want->data, got, want->nbytes) == 0;
  const float* a = (const float*)want->data;
  const float* b = (const float*)got;
  size_t n = want->nbytes / 4;
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - (double)b[i]);
    if (!(d <= atol + 1e-3 * fabs((double)a[i]))) {
      fprintf(stderr, "%s[%zu]: got %g, expected %g\n", want->name, i, b[i], a[i]);
      return 0;
    }
    if (d > worst) worst = d;
  }
  printf("output %s: %zu values, max |diff| %.3g\n", want->name, n, worst);
  return 1;
}

int main(int argc, char** argv) {
  CHECK(argc >= 3, "usage: %s LIBRARY CASE_DIR [ATOL]", argv[0]);
  double atol = argc > 3 ? atof(argv[3]) : 1e-4;
  char path[1024];

  /* --- load the case ------------------------------------------------------------------ */
  Tensor ts[MAX_TENSORS];
  int nt = 0;
  snprintf(path, sizeof path, "%s/tensors.txt", argv[2]);
  FILE* mf = fopen(path, "r");
  CHECK(mf != NULL, "cannot open %s", path);
  while (nt < MAX_TENSORS) {
    Tensor* t = &ts[nt];
    if (fscanf(mf, "%15s %255s %lu %u", t->role, t->name, (unsigned long*)&t->dataType, &t->ndim) != 4) break;
    CHECK(t->ndim <= 8, "too many dims");
    for (uint32_t i = 0; i < t->ndim; i++) CHECK(fscanf(mf, "%lu", (unsigned long*)&t->dims[i]) == 1, "dims");
    CHECK(fscanf(mf, "%511s", t->file) == 1, "file");
    char fp[1024];
    snprintf(fp, sizeof fp, "%s/%s", argv[2], t->file);
    t->data = read_file(fp, &t->nbytes);
    nt++;
  }
  fclose(mf);
  size_t model_size;
  snprintf(path, sizeof path, "%s/model.onnx", argv[2]);
  void* model = read_file(path, &model_size);

  /* --- load the library ---------------------------------------------------------------- */
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL, "dlopen: %s", dlerror());
  L.GetBackendIDs = (onnxGetBackendIDsFunction)sym(h, "onnxGetBackendIDs");
  L.ReleaseBackendID = (onnxReleaseBackendIDFunction)sym(h, "onnxReleaseBackendID");
  L.GetBackendInfo = (onnxGetBackendInfoFunction)sym(h, "onnxGetBackendInfo");
  L.GetBackendCompatibility = (onnxGetBackendCompatibilityFunction)sym(h, "onnxGetBackendCompatibility");
  L.InitBackend = (onnxInitBackendFunction)sym(h, "onnxInitBackend");
  L.ReleaseBackend = (onnxReleaseBackendFunction)sym(h, "onnxReleaseBackend");
  L.InitEvent = (onnxInitEventFunction)sym(h, "onnxInitEvent");
  L.SignalEvent = (onnxSignalEventFunction)sym(h, "onnxSignalEvent");
  L.GetEventState = (onnxGetEventStateFunction)sym(h, "onnxGetEventState");
  L.WaitEvent = (onnxWaitEventFunction)sym(h, "onnxWaitEvent");
  L.ReleaseEvent = (onnxReleaseEventFunction)sym(h, "onnxReleaseEvent");
  L.InitGraph = (onnxInitGraphFunction)sym(h, "onnxInitGraph");
  L.SetGraphIO = (onnxSetGraphIOFunction)sym(h, "onnxSetGraphIO");
  L.RunGraph = (onnxRunGraphFunction)sym(h, "onnxRunGraph");
  L.ReleaseGraph = (onnxReleaseGraphFunction)sym(h, "onnxReleaseGraph");
  L.GetExtensionFunctionAddress =
      (clglowGetExtensionFunctionAddressFunction)sym(h, "onnxGetExtensionFunctionAddress");

  /* --- backends ------------------------------------------------------------------------ */
  size_t nb = 0;
  EXPECT(L.GetBackendIDs(NULL, &nb), ONNXIFI_STATUS_FALLBACK);
  CHECK(nb >= 1, "no backends");
  EXPECT(L.GetBackendIDs(NULL, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  onnxBackendID* ids = (onnxBackendID*)calloc(nb, sizeof(onnxBackendID));
  EXPECT(L.GetBackendIDs(ids, &nb), ONNXIFI_STATUS_SUCCESS);
  onnxBackendID id = ids[0];

  char info[512];
  size_t size = sizeof info;
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_NAME, info, &size), ONNXIFI_STATUS_SUCCESS);
  CHECK(strcmp(info, "clglow") == 0 && size == 7, "name %s size %zu", info, size);
  size = sizeof info;
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_DEVICE, info, &size), ONNXIFI_STATUS_SUCCESS);
  printf("backend 0 of %zu: %s\n", nb, info);
  size = 2;
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_DEVICE, info, &size), ONNXIFI_STATUS_FALLBACK);
  CHECK(size == strlen(info) + 1, "size query gave %zu", size);
  uint64_t u64 = 0;
  size = sizeof u64;
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_MEMORY_TYPES, &u64, &size), ONNXIFI_STATUS_SUCCESS);
  CHECK(u64 & ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER, "memory types %lu", (unsigned long)u64);
  size = sizeof u64;
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_ONNXIFI_VERSION, &u64, &size), ONNXIFI_STATUS_SUCCESS);
  CHECK(u64 == UINT64_C(0x0000000100000000), "version");
  void* cl_device = NULL;
  size = sizeof cl_device;
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_OPENCL_DEVICE_ID, &cl_device, &size), ONNXIFI_STATUS_SUCCESS);
  CHECK(cl_device != NULL, "cl_device_id");
  size = sizeof info;
  EXPECT(L.GetBackendInfo(id, 9999, info, &size), ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE);
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_NAME, info, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  size = sizeof info;
  EXPECT(L.GetBackendInfo((onnxBackendID)(uintptr_t)0x1234, ONNXIFI_BACKEND_NAME, info, &size),
         ONNXIFI_STATUS_INVALID_ID);

  onnxStatus compat = L.GetBackendCompatibility(id, model_size, model);
  CHECK(compat == ONNXIFI_STATUS_SUCCESS || compat == ONNXIFI_STATUS_FALLBACK, "compatibility 0x%x", compat);
  EXPECT(L.GetBackendCompatibility(id, 0, model), ONNXIFI_STATUS_INVALID_SIZE);
  EXPECT(L.GetBackendCompatibility(id, model_size, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  EXPECT(L.GetBackendCompatibility(id, 5, "\xff\xff\xff\xff\xff"), ONNXIFI_STATUS_INVALID_PROTOBUF);

  const uint64_t props[] = {ONNXIFI_BACKEND_PROPERTY_LOG_LEVEL, ONNXIFI_LOG_LEVEL_WARNING,
                            ONNXIFI_BACKEND_PROPERTY_OPTIMIZATION, ONNXIFI_OPTIMIZATION_LOW_LATENCY,
                            ONNXIFI_BACKEND_PROPERTY_NONE};
  const uint64_t bad_props[] = {0x7777, 1, ONNXIFI_BACKEND_PROPERTY_NONE};
  onnxBackend backend = (onnxBackend)(uintptr_t)1;
  EXPECT(L.InitBackend(id, bad_props, &backend), ONNXIFI_STATUS_UNSUPPORTED_PROPERTY);
  CHECK(backend == NULL, "backend not NULL after a failure");
  EXPECT(L.InitBackend(id, props, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  EXPECT(L.InitBackend(id, props, &backend), ONNXIFI_STATUS_SUCCESS);

  /* --- graph with weight descriptors ----------------------------------------------------- */
  onnxTensorDescriptorV1 w[MAX_TENSORS], in[MAX_TENSORS], out[MAX_TENSORS];
  void* out_mem[MAX_TENSORS];
  void* in_mem[MAX_TENSORS];
  int nw = 0, ni = 0, no = 0, oi[MAX_TENSORS], ii[MAX_TENSORS];
  for (int i = 0; i < nt; i++) {
    if (strcmp(ts[i].role, "weight") == 0) w[nw++] = desc(&ts[i], ts[i].data);
  }
  onnxGraph graph = NULL;
  EXPECT(L.InitGraph((onnxBackend)(uintptr_t)0x99, NULL, model_size, model, nw, w, &graph),
         ONNXIFI_STATUS_INVALID_BACKEND);
  EXPECT(L.InitGraph(backend, NULL, model_size, model, nw, NULL, &graph), nw ? ONNXIFI_STATUS_INVALID_POINTER
                                                                               : ONNXIFI_STATUS_SUCCESS);
  if (graph) EXPECT(L.ReleaseGraph(graph), ONNXIFI_STATUS_SUCCESS);
  onnxStatus st = L.InitGraph(backend, NULL, model_size, model, nw, w, &graph);
  CHECK(st == ONNXIFI_STATUS_SUCCESS || st == ONNXIFI_STATUS_FALLBACK, "onnxInitGraph 0x%x", st);
  /* the weights were copied: scribbling over them now must not change the results */
  for (int i = 0; i < nt; i++)
    if (strcmp(ts[i].role, "weight") == 0) memset(ts[i].data, 0x7f, ts[i].nbytes);

  for (int i = 0; i < nt; i++) {
    if (strcmp(ts[i].role, "input") == 0) {
      in_mem[ni] = calloc(1, ts[i].nbytes); /* zeros now, the real input only after onnxRunGraph */
      ii[ni] = i;
      in[ni] = desc(&ts[i], in_mem[ni]);
      ni++;
    } else if (strcmp(ts[i].role, "output") == 0) {
      out_mem[no] = calloc(1, ts[i].nbytes);
      oi[no] = i;
      out[no] = desc(&ts[i], out_mem[no]);
      no++;
    }
  }
  EXPECT(L.SetGraphIO(graph, ni, in, 0, out), ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  onnxTensorDescriptorV1 bad = out[0];
  bad.name = "no_such_tensor";
  EXPECT(L.SetGraphIO(graph, ni, in, 1, &bad), ONNXIFI_STATUS_INVALID_NAME);
  bad = out[0];
  bad.tag = 0x1234;
  EXPECT(L.SetGraphIO(graph, ni, in, 1, &bad), ONNXIFI_STATUS_UNSUPPORTED_TAG);
  bad = out[0];
  bad.buffer = 0;
  EXPECT(L.SetGraphIO(graph, ni, in, 1, &bad), ONNXIFI_STATUS_INVALID_MEMORY_LOCATION);
  EXPECT(L.SetGraphIO(graph, ni, in, no, out), ONNXIFI_STATUS_SUCCESS);

  onnxMemoryFenceV1 fin, fout;
  memset(&fin, 0, sizeof fin);
  memset(&fout, 0, sizeof fout);
  fin.tag = fout.tag = ONNXIFI_TAG_MEMORY_FENCE_V1;
  fin.type = fout.type = ONNXIFI_SYNCHRONIZATION_EVENT;
  EXPECT(L.InitEvent(backend, &fin.event), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.RunGraph(graph, &fin, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  onnxEventState state = 0;
#ifdef CLGLOW_SIGNAL_BEFORE_RUN /* debugging aid: inputs ready before the run */
  for (int k = 0; k < ni; k++) memcpy(in_mem[k], ts[ii[k]].data, ts[ii[k]].nbytes);
  EXPECT(L.SignalEvent(fin.event), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.RunGraph(graph, &fin, &fout), ONNXIFI_STATUS_SUCCESS);
#else
  EXPECT(L.RunGraph(graph, &fin, &fout), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.GetEventState(fout.event, &state), ONNXIFI_STATUS_SUCCESS);
  CHECK(state == ONNXIFI_EVENT_STATE_NONSIGNALLED, "output signalled before the input fence");
  for (int k = 0; k < ni; k++) memcpy(in_mem[k], ts[ii[k]].data, ts[ii[k]].nbytes);
  EXPECT(L.SignalEvent(fin.event), ONNXIFI_STATUS_SUCCESS);
#endif
  EXPECT(L.SignalEvent(fin.event), ONNXIFI_STATUS_INVALID_STATE);
  EXPECT(L.WaitEvent(fout.event), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.GetEventState(fout.event, &state), ONNXIFI_STATUS_SUCCESS);
  CHECK(state == ONNXIFI_EVENT_STATE_SIGNALLED, "output not signalled after the wait");
  for (int k = 0; k < no; k++) CHECK(compare(&ts[oi[k]], out_mem[k], atol), "output %d differs", k);
  EXPECT(L.ReleaseEvent(fout.event), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.ReleaseEvent(fout.event), ONNXIFI_STATUS_INVALID_EVENT);
  EXPECT(L.ReleaseEvent(fin.event), ONNXIFI_STATUS_SUCCESS);

  /* --- extensions --------------------------------------------------------------------------- */
  size = sizeof info;
  EXPECT(L.GetBackendInfo(id, ONNXIFI_BACKEND_EXTENSIONS, info, &size), ONNXIFI_STATUS_SUCCESS);
  CHECK(strstr(info, "onnxWaitEventFor") != NULL, "extensions: %s", info);
  onnxExtensionFunctionPointer fp = NULL;
  EXPECT(L.GetExtensionFunctionAddress(id, "onnxNoSuchThing", &fp), ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  EXPECT(L.GetExtensionFunctionAddress(id, "onnxWaitEventFor", NULL), ONNXIFI_STATUS_INVALID_POINTER);
  EXPECT(L.GetExtensionFunctionAddress(id, "onnxSetIOAndRunGraphFunction", &fp), ONNXIFI_STATUS_SUCCESS);
  clglowSetIOAndRunGraphFunction setio_run = (clglowSetIOAndRunGraphFunction)fp;
  EXPECT(L.GetExtensionFunctionAddress(id, "onnxWaitEventFor", &fp), ONNXIFI_STATUS_SUCCESS);
  clglowWaitEventForFunction wait_for = (clglowWaitEventForFunction)fp;
  EXPECT(L.GetExtensionFunctionAddress(id, "onnxReleaseTraceEvents", &fp), ONNXIFI_STATUS_SUCCESS);
  clglowReleaseTraceEventsFunction release_traces = (clglowReleaseTraceEventsFunction)fp;

  for (int k = 0; k < no; k++) memset(out_mem[k], 0, ts[oi[k]].nbytes);
  onnxTraceEventList traces = {0, NULL};
  memset(&fout, 0, sizeof fout);
  fout.tag = ONNXIFI_TAG_MEMORY_FENCE_V1;
  fout.type = ONNXIFI_SYNCHRONIZATION_EVENT;
  EXPECT(setio_run(graph, ni, in, no, out, &fout, &traces), ONNXIFI_STATUS_SUCCESS);
  onnxStatus run_status = -1;
  char msg[256];
  size_t msg_len = sizeof msg;
  EXPECT(wait_for(fout.event, 0, &state, &run_status, msg, &msg_len), ONNXIFI_STATUS_SUCCESS);
  CHECK(state == ONNXIFI_EVENT_STATE_SIGNALLED && run_status == ONNXIFI_STATUS_SUCCESS, "waitFor state 0x%x status 0x%x",
        state, run_status);
  for (int k = 0; k < no; k++) CHECK(compare(&ts[oi[k]], out_mem[k], atol), "output %d differs (ext)", k);
  CHECK(traces.numEvents >= 1 && traces.traceEvents != NULL, "no trace events");
  printf("trace: %lu events, first %s (%c) %lu us\n", (unsigned long)traces.numEvents,
         traces.traceEvents[0]->eventName, traces.traceEvents[0]->eventType,
         (unsigned long)traces.traceEvents[0]->duration);
  EXPECT(release_traces(&traces), ONNXIFI_STATUS_SUCCESS);
  CHECK(traces.numEvents == 0 && traces.traceEvents == NULL, "traces not released");
  EXPECT(release_traces(NULL), ONNXIFI_STATUS_INVALID_POINTER);
  EXPECT(L.ReleaseEvent(fout.event), ONNXIFI_STATUS_SUCCESS);

  /* --- foreign and stale handles ------------------------------------------------------------- */
  EXPECT(L.ReleaseGraph((onnxGraph)(uintptr_t)0xdeadbeef), ONNXIFI_STATUS_INVALID_GRAPH);
  EXPECT(L.ReleaseGraph(backend), ONNXIFI_STATUS_INVALID_GRAPH);
  EXPECT(L.WaitEvent(NULL), ONNXIFI_STATUS_INVALID_EVENT);
  EXPECT(L.SignalEvent((onnxEvent)graph), ONNXIFI_STATUS_INVALID_EVENT);
  EXPECT(L.ReleaseBackend(graph), ONNXIFI_STATUS_INVALID_BACKEND);

  EXPECT(L.ReleaseGraph(graph), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.ReleaseGraph(graph), ONNXIFI_STATUS_INVALID_GRAPH);
  EXPECT(L.ReleaseBackend(backend), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.ReleaseBackend(backend), ONNXIFI_STATUS_INVALID_BACKEND);
  for (size_t i = 0; i < nb; i++) EXPECT(L.ReleaseBackendID(ids[i]), ONNXIFI_STATUS_SUCCESS);
  EXPECT(L.ReleaseBackendID(ids[0]), ONNXIFI_STATUS_INVALID_ID);
  free(ids);
  printf("PASS\n");
  return 0;
}
