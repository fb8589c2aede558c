"""Running ONNX models: sessions, inputs, parity, and (in the worker) timing."""
