"""The one commented exclusion list of the ONNX backend suite: (regex on the test name, reason).

Every case not listed here passes, or skips with UnsupportedOperator when host fallback is
disabled. Grouped by cause; the first groups are clglow limitations to work on.
"""

EXCLUDED: list = [
    # --- sequences and optionals: the session API takes and returns tensors only ------------------------
    (r"^test_(identity_opt|identity_sequence|if_opt|if_seq)_", "sequence/optional graph outputs"),
    (r"^test_optional_(get_element_optional_sequence|get_element_sequence|has_element_empty_optional_input)_",
     "sequence/optional graph inputs"),
    (r"^test_sequence_(insert_at_back|insert_at_front)_", "sequence graph inputs"),
    (r"^test_sequence_map_", "sequence graph inputs/outputs (SequenceMap)"),
    (r"^test_sequence_model[1-8]_", "sequence graph outputs (simple model group)"),
    (r"^test_split_to_sequence_", "sequence graph outputs (SplitToSequence)"),
    (r"^test_loop(13_seq|16_seq_none)_", "Loop with sequence/optional state"),
    (r"^test_scan_sum_", "Scan-8 with a sequence_lens input that onnx.reference's Scan cannot take"),
    # --- strings: no string tensors in the session API (feeds are converted to numeric arrays) --------
    (r"^test_(equal_string|string_concat|string_split|strnorm|regex_full_match)", "string tensors"),
    # --- environment / nondeterminism ----------------------------------------------------------------
    (r"^test_image_decoder_", "onnx.reference's ImageDecoder needs Pillow (not a clglow dependency)"),
    (r"^test_bernoulli", "random output: compared with a different random draw"),
    (r"^test_dft_inverse_(opset19_)?cpu", "expected = numpy's float32 FFT noise (imag 1.9e-7, exact 0) > atol 1e-7"),
    (r"^test_attention_4d_causal_fp16_expanded_", "float16 ops run on the device in fp32 arithmetic on half storage, "
     "rounded once per op (passes/precision.py); the reference rounds every numpy float16 step: 2 of 192 outputs "
     "2 half ulp apart, over rtol 1e-3"),
]
