"""Parsers: one module per input format (``kineto`` for PyTorch profiler JSON, ``ascend`` for CANN / torch_npu
output, ``snapshot`` for memory snapshots), each with a ``parse(path) -> (events, memory events, meta)``
(``unit.Parse``) that fills the raw columns of the common tables of ``traceanalyzer.schema`` from one rank's trace;
``traceanalyzer.linking`` derives the call tree, launches and steps from them, the same way for every platform.
``detect.units`` decides which parser reads each trace a path holds. Bad input raises ``TraceError`` naming the file;
values a parser drops or clips are counted in the meta's adjustments, never skipped silently. Parsers import only
the vocabulary below them, never an analyzer."""
