import sys

from .runner import main

if sys.argv[1:2] == ["zoo"]:  # python -m benchmarks zoo ...: the model zoo (benchmarks/zoo)
    from .zoo.run import main as zoo_main

    sys.exit(zoo_main(sys.argv[2:]))
if sys.argv[1:2] == ["quant"]:  # python -m benchmarks quant ...: quantized models (benchmarks/quant.py)
    from .quant import main as quant_main

    sys.exit(quant_main(sys.argv[2:]))
if sys.argv[1:2] == ["serve"]:  # python -m benchmarks serve ...: Ray Serve + KServe v2 (benchmarks/serve.py)
    from .serve import main as serve_main

    sys.exit(serve_main(sys.argv[2:]))
sys.exit(main())
