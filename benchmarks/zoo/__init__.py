"""The benchmark zoo: real architectures built locally, exported to ONNX, run beside onnxruntime.

    python -m benchmarks zoo                    # every model, one table and the geometric mean
    python -m benchmarks zoo --list             # the catalogue
    python -m benchmarks zoo --models bert,gpt2_decode --repeat 20 --json zoo.json

Each model is built with seeded random weights, nothing downloaded (timm ``pretrained=False``,
Hugging Face transformers from small config objects, torchvision ``weights=None``, and a few
own modules), exported with ``torch.onnx`` (the TorchScript exporter, ``dynamo=False``, opset
17) into ``<clglow cache>/zoo/<name>/`` together with seeded inputs, and re-exported only when
missing. torch, timm, transformers and torchvision are benchmark-only dependencies (the ``zoo``
extra); clglow itself never imports them, and the timing process does not either: exports run
in a child process, and every model is timed in a child process of its own (a crash or hang
in one model is listed, not fatal).

Modules: ``catalog`` (the model list), ``vision`` / ``text`` / ``own`` (the builders),
``export`` (ONNX files in the cache), ``measure`` (one model side by side), ``run`` (the
command line and the table).
"""
