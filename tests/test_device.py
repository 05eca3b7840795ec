"""Device enumeration and selection: the selector grammar, errors that list the choices,
shared contexts, and kernel sources found in a checkout or an installed wheel."""
from __future__ import annotations

import dataclasses

import threading
from types import SimpleNamespace

import numpy as np
import pyopencl as cl
import pytest

from clglow.errors import CompileError, InvalidArgument, NoDevice
from clglow.lower.base import DeviceInfo
from clglow.runtime import device as D
from clglow.runtime import selection as S
from clglow.runtime import sources

GPU, CPU, ACC = int(cl.device_type.GPU), int(cl.device_type.CPU), int(cl.device_type.ACCELERATOR)


def fake_platforms():
    """Three platforms as resolve sees them: names and device types only."""
    def dev(name, t):
        return SimpleNamespace(name=name, type=t)

    return [
        (SimpleNamespace(name="Portable Computing Language"),
         [dev("pthread-AMD EPYC", CPU)]),
        (SimpleNamespace(name="NVIDIA CUDA"),
         [dev("NVIDIA GeForce RTX 4090", GPU), dev("NVIDIA H200", GPU)]),
        (SimpleNamespace(name="Xilinx"), [dev("FPGA thing", ACC)]),
    ]


# --- the selector grammar (no OpenCL needed) ------------------------------------------------
@pytest.mark.parametrize("selector, expected", [
    (None, (1, 0)),             # default: the first GPU
    ("", (1, 0)),
    ("0:0", (0, 0)),
    ("1:1", (1, 1)),
    ("1", (1, 0)),              # platform only: its first device
    ("portable", (0, 0)),       # substring of a platform name
    ("PORTABLE:PTHREAD", (0, 0)),  # case-insensitive
    ("nvidia:h200", (1, 1)),
    ("nvidia:1", (1, 1)),
    ("1:h200", (1, 1)),
    ("cuda:", (1, 0)),          # empty device part: the first device
    ("gpu", (1, 0)),
    ("GPU", (1, 0)),
    ("cpu", (0, 0)),
    ("accelerator", (2, 0)),
    ("rtx", (1, 0)),            # no platform matches: tried against device names
    ("h200", (1, 1)),
])
def test_resolve_selectors(selector, expected):
    assert S.resolve(selector, fake_platforms()) == expected


@pytest.mark.parametrize("selector, reason", [
    ("5", "index 5 out of range"),
    ("0:3", "index 3 out of range"),
    ("amd:0", "no platform name contains 'amd'"),
    ("nvidia:quadro", "no device"),
    ("nosuchthing", "no platform name contains"),
])
def test_resolve_no_match_lists_choices(selector, reason):
    with pytest.raises(NoDevice) as ei:
        S.resolve(selector, fake_platforms())
    msg = str(ei.value)
    assert reason in msg
    assert "Available devices" in msg
    # every device is listed with its selector
    for sel, name in [("0:0", "pthread-AMD EPYC"), ("1:0", "RTX 4090"), ("1:1", "H200"), ("2:0", "FPGA")]:
        assert sel in msg and name in msg


def test_default_without_gpu_is_first_device():
    plats = [p for p in fake_platforms() if p[0].name != "NVIDIA CUDA"]
    assert S.resolve(None, plats) == (0, 0)
    with pytest.raises(NoDevice, match="No GPU device"):
        S.resolve("gpu", plats)


def test_no_platform_says_how_to_install(monkeypatch):
    def boom():
        raise cl.LogicError(cl._cl._ErrorRecord(msg="clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR",
                                                 code=-1001, routine="clGetPlatformIDs"))

    monkeypatch.setattr(cl, "get_platforms", boom)
    monkeypatch.setattr(D, "_default", None)
    assert D.list_devices() == []
    with pytest.raises(NoDevice, match=r'pip install "pyopencl\[pocl\]"') as ei:
        D.select_device()
    assert "pocl-opencl-icd" in str(ei.value)


def test_no_platform_plain_runtime_error(monkeypatch):
    monkeypatch.setattr(cl, "get_platforms", lambda: (_ for _ in ()).throw(RuntimeError("no ICD")))
    with pytest.raises(NoDevice, match="pocl"):
        D.select_device("0:0")


def test_selector_from_environment(monkeypatch):
    monkeypatch.setenv("CLGLOW_DEVICE", "no-such-device-anywhere")
    with pytest.raises(NoDevice, match="Available devices"):
        D.select_device()
    monkeypatch.delenv("CLGLOW_DEVICE")
    monkeypatch.setenv("PYOPENCL_CTX", "99:0")
    with pytest.raises(NoDevice, match="out of range"):
        D.select_device()


# --- real devices ---------------------------------------------------------------------------
def test_list_devices_fields():
    devices = D.list_devices()
    assert devices, "the test machine has at least one OpenCL device"
    for d in devices:
        assert d.selector == f"{d.platform_index}:{d.device_index}"
        assert d.type in ("cpu", "gpu", "accelerator")
        assert d.compute_units >= 1 and d.global_mem_size > 0 and 0 < d.max_alloc_size <= d.global_mem_size
        assert isinstance(d.has_fp16, bool) and isinstance(d.has_fp64, bool)
        assert d.name and d.platform_name and d.driver_version and d.opencl_version.startswith("OpenCL")
        assert d.selector in d.describe() and d.name in d.describe()
        # the advertised selectors really select this device
        plats = S.platforms()
        assert S.resolve(d.selector, plats) == (d.platform_index, d.device_index)
        if d.name_selector:
            assert S.resolve(d.name_selector, plats) == (d.platform_index, d.device_index)


def test_select_device_is_shared(device):
    assert isinstance(device.context, cl.Context)
    assert D.select_device() is device
    assert D.select_device(device.selector) is device
    assert device.selector in device.describe()
    # a type word picks the first device of that type (this one, unless CLGLOW_DEVICE chose a later one)
    by_type = D.select_device(device.info.type)
    assert by_type.info.type == device.info.type
    first = next(d.selector for d in D.list_devices() if d.type == device.info.type)
    assert (by_type is device) == (device.selector == first)


def test_device_info(device):
    info = device.info
    assert isinstance(info, DeviceInfo)
    d = device.cl_device
    assert info.name == d.name.strip()
    assert info.max_work_group_size == d.max_work_group_size
    assert info.local_mem_size == d.local_mem_size
    assert info.max_alloc_size == d.max_mem_alloc_size
    assert info.preferred_vector_width_float >= 1
    assert info.type in ("cpu", "gpu", "accelerator")


def test_queues(device):
    assert not (device.queue.properties & cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE)
    q = device.make_queue(profiling=True)
    assert q.properties & cl.command_queue_properties.PROFILING_ENABLE
    assert device.profiling_queue is device.profiling_queue
    assert device.profiling_queue.properties & cl.command_queue_properties.PROFILING_ENABLE


def test_from_context_shares_and_validates(device):
    ctx = cl.Context([device.cl_device])
    a = D.Device.from_context(ctx)
    b = D.Device.from_context(ctx, device.cl_device)
    assert a is b and a.context is ctx and a is not device
    assert D.Device.from_context(ctx.int_ptr) is a  # a raw cl_context handle, as ONNXIFI passes it
    # the same device facts (the GEMM tiles and the tuning database's entries are per Device
    # object, read or chosen on first use: another test's search may have filled the database)
    assert (dataclasses.replace(a.info, gemm_tiles=None, tuned=())
            == dataclasses.replace(device.info, gemm_tiles=None, tuned=()))
    other = [d for p in cl.get_platforms() for d in p.get_devices() if d != device.cl_device]
    if other:
        with pytest.raises(InvalidArgument, match="not in the given context"):
            D.Device.from_context(ctx, other[0])


def test_probe(device):
    assert D.probe(device.selector) is None


# --- kernel sources -------------------------------------------------------------------------
@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """A private kernels folder with a header, in place of kernels_cl/."""
    (tmp_path / "scale_common.h").write_text("#define SCALE_BY(x) ((x) * FACTOR)\n")
    (tmp_path / "scale.cl").write_text(
        '#include "scale_common.h"\n'
        "__kernel void scale(__global float* x) { size_t i = get_global_id(0); x[i] = SCALE_BY(x[i]); }\n")
    (tmp_path / "broken.cl").write_text("__kernel void broken(__global float* x) { x[0] = nope; }\n")
    monkeypatch.setattr(sources, "_kernels_root", lambda: tmp_path)
    sources.clear_cache()
    yield tmp_path
    sources.clear_cache()


def test_program_builds_with_include_and_options(device, kernels):
    prg = device.program("scale", ("-DFACTOR=3.0f",))
    x = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    cl.Kernel(prg, "scale")(device.queue, (8,), None, buf)
    out = np.empty_like(x)
    cl.enqueue_copy(device.queue, out, buf)
    np.testing.assert_allclose(out, x * 3)
    assert device.program("scale", ("-DFACTOR=3.0f",)) is prg


def test_program_errors(device, kernels):
    with pytest.raises(CompileError) as ei:
        device.program("broken", ("-DX=1",))
    # the program's options first, then any the device adds (-DCLG_SPLIT16=1, kernels_cl/vmath.h)
    assert ei.value.options[0] == "-DX=1" and ei.value.log
    with pytest.raises(CompileError, match="not found"):
        device.program("does_not_exist", ())
    with pytest.raises(CompileError, match="invalid kernel program name"):
        device.program("../etc/passwd", ())


def test_headers_are_spliced_and_keyed(device, kernels, monkeypatch):
    """A header is inlined into the program text, so editing it gives a new program; a missing
    header is a CompileError naming it."""
    assert "#define SCALE_BY" in D.kernel_source("scale")
    first = device.program("scale", ("-DFACTOR=2.0f",))
    (kernels / "scale_common.h").write_text("#define SCALE_BY(x) ((x) * FACTOR + 1.0f)\n")
    sources.clear_cache()
    second = device.program("scale", ("-DFACTOR=2.0f",))
    assert second is not first
    x = np.arange(4, dtype=np.float32)
    buf = cl.Buffer(device.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    cl.Kernel(second, "scale")(device.queue, (4,), None, buf)
    out = np.empty_like(x)
    cl.enqueue_copy(device.queue, out, buf)
    np.testing.assert_allclose(out, x * 2 + 1)
    (kernels / "lonely.cl").write_text('#include "missing.h"\n__kernel void f(__global float* x) {}\n')
    with pytest.raises(CompileError, match="missing.h"):
        device.program("lonely", ())


def test_prepare_builds_in_background_and_warms_up(device, kernels):
    """prepare() builds the program off the calling thread and launches the kernel once with its
    no-op arguments (a dummy buffer for buffers); a failing program is left for program()."""
    from clglow.lower.base import Buf
    (kernels / "early.cl").write_text(
        "__kernel void early(__global float* x, int n) { if ((int)get_global_id(0) >= n) return; x[0] = 1.0f; }\n")
    before = device.cache.stats()["source_builds"]
    device.prepare("early", ("-DUNUSED=1",), "early", (1,), [Buf("x"), np.int32(0)])
    device.prepare("early", ("-DUNUSED=1",), "early", (1,), [Buf("x"), np.int32(0)])  # once only
    device.prepare("broken", (), "broken", (1,), [Buf("x")])
    device.wait_prepared(timeout=120)
    assert device.cache.stats()["source_builds"] == before + 1
    hits = device.cache.stats()["memory_hits"]
    device.program("early", ("-DUNUSED=1",))
    assert device.cache.stats()["memory_hits"] == hits + 1
    with pytest.raises(CompileError):
        device.program("broken", ())


def test_program_threads(device, kernels):
    results, errors = [], []

    def work(i):
        try:
            results.append(device.program("scale", (f"-DFACTOR={i % 3}.0f",)))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({id(p) for p in results}) == 3


def test_shipped_kernels_are_found():
    """kernels_cl/ is reachable (checkout fallback or clglow.kernels_cl package data)."""
    root = D.kernels_dir()
    names = [e.name for e in root.iterdir() if e.name.endswith(".cl")]
    assert names, f"no .cl files under {root}"
    assert D.kernel_source(names[0][:-3]).strip()


def test_default_skips_devices_that_cannot_build(monkeypatch):
    """A device that cannot compile (e.g. pocl on a CPU its LLVM does not know) is skipped."""
    monkeypatch.setattr(D, "_selected", {})
    monkeypatch.setattr(D, "_default", None)
    monkeypatch.delenv("CLGLOW_DEVICE", raising=False)
    monkeypatch.delenv("PYOPENCL_CTX", raising=False)
    devices = D.list_devices()
    first = D.select_device()
    monkeypatch.setattr(D, "_selected", {})
    monkeypatch.setattr(D, "_default", None)
    broken = first.cl_device.int_ptr
    monkeypatch.setattr(S, "probe_context", lambda ctx, d: "error: unknown target CPU 'generic'"
                        if d.int_ptr == broken else None)
    if len(devices) > 1:
        assert D.select_device().cl_device.int_ptr != broken
    monkeypatch.setattr(D, "_selected", {})
    monkeypatch.setattr(D, "_default", None)
    monkeypatch.setattr(S, "probe_context", lambda ctx, d: "error: unknown target CPU 'generic'")
    with pytest.raises(NoDevice, match="can build a kernel") as ei:
        D.select_device()
    assert "unknown target CPU" in str(ei.value) and first.selector in str(ei.value)
    # an explicit selector is taken as given, without probing
    assert D.select_device(first.selector).cl_device.int_ptr == broken


# --- float16 builtin math on a pocl without AVX-512 (kernels_cl/vmath.h) ----------------------
@pytest.mark.parametrize("version, cpu, split", [
    ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-skylake-avx512", "skylake-avx512", False),
    ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3", "znver3", True),
    ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-znver4", "znver4", False),
    ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-haswell", "haswell", True),
    ("OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-icelake-server", "icelake-server", False),
    ("OpenCL 3.0 PoCL HSTR: pthread-aarch64-unknown-linux-gnu-neoverse-v1", None, False),
    ("OpenCL 3.0 CUDA", None, False),
])
def test_pocl_target_cpu_decides_the_float16_split(version, cpu, split):
    dev = SimpleNamespace(version=version)
    from clglow import target

    assert target.pocl_target_cpu(dev) == cpu
    assert target._float16_math_split(dev) is split


def _vector_math_model():
    """Conv + Swish, depthwise + Sigmoid, Softmax over 20 (a float16 run and a tail), then erf,
    tanh, exp, log, abs and sqrt: every kernel that calls builtin math on float16 vectors."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    c = 32
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), "W1"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "B1"),
             numpy_helper.from_array((rng.standard_normal((c, 1, 3, 3)) * 0.3).astype(np.float32), "W2")]
    nodes = [helper.make_node("Conv", ["X", "W1", "B1"], ["y1"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["y1"], ["s1"]),
             helper.make_node("Mul", ["y1", "s1"], ["y2"]),
             helper.make_node("Conv", ["y2", "W2"], ["y3"], pads=[1, 1, 1, 1], group=c),
             helper.make_node("Sigmoid", ["y3"], ["y4"]),
             helper.make_node("Softmax", ["y4"], ["y5"], axis=-1),
             helper.make_node("Erf", ["y5"], ["y6"]),
             helper.make_node("Tanh", ["y6"], ["y7"]),
             helper.make_node("Exp", ["y7"], ["y8"]),
             helper.make_node("Log", ["y8"], ["y9"]),
             helper.make_node("Abs", ["y9"], ["y10"]),
             helper.make_node("Sqrt", ["y10"], ["Y"])]
    graph = helper.make_graph(nodes, "vmath", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, c, 12, 20])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, c, 12, 20])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("split", [False, True])
def test_float16_math_split_matches_the_reference(device, split):
    """The same model on a Device told to split float16 math (as on PyPI's pocl on a Zen 4)
    and on one that is not, against onnx's reference."""
    import clglow
    from onnx.reference import ReferenceEvaluator

    if not split and device.info.float16_math_split:
        pytest.skip("this device's compiler cannot run float16 builtin math whole (the fault the split avoids)")
    model = _vector_math_model()
    x = np.random.default_rng(1).standard_normal((1, 32, 12, 20)).astype(np.float32)
    dev = D.Device(device.context, device.cl_device)  # its own program cache and info
    dev.info = dataclasses.replace(dev.info, float16_math_split=split)
    got = clglow.InferenceSession(model, device=dev).run(None, {"X": x})[0]
    want = ReferenceEvaluator(model).run(None, {"X": x})[0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    built = [opts for (_, opts) in dev.cache._memory]
    assert built and all(("-DCLG_SPLIT16=1" in opts) is split for opts in built)
