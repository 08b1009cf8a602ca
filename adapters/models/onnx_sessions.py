"""ONNX files cached from a built graph, and the ONNX Runtime sessions over them: what the packaged
MiniLM (``onnx_minilm``) and any brought encoder (``encoder_onnx``) run on alike.

The fp32 file is built from the weights the first time it is needed, a quantized one from the fp32
file, each written once into the cache folder, owner-only, whole or not at all; a sidecar records
what the file was built from and its own SHA-256, so a file that is missing, truncated, altered or
that ONNX Runtime refuses is rebuilt (once, then a typed ``ModelUnavailable``). A session is opened
per intra-op thread count on first use, the tokenizer with the first.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.adapters.models.minilm import file_sha256
from memory_core.adapters.models.model_dir import TOKENIZER_FILE
from memory_core.domain.errors import ModelUnavailable


class CachedOnnxSessions:
    """Sessions by thread count over ``cache_dir``'s file for the ``inference`` path. A subclass
    names the file and what it is built from (``_cache_entry``), builds the fp32 graph
    (``_build_fp32``), loads the tokenizer and says what a failed build names (``_build_details``)."""

    inference: str
    cache_dir: Path
    _model_file: Path | None
    _sessions: dict[int, Any]  # intra-op threads -> session
    _tokenizer: Any
    _load_lock: threading.Lock
    _pad_id = 0  # what ids pad a batch's shorter texts with
    _takes_token_types = False  # whether the graph reads token_type_ids

    def _cache_entry(self, inference: str) -> tuple[Path, dict[str, Any]]:
        """The cached file of a path and the stamp its sidecar records (its SHA-256 added)."""
        raise NotImplementedError

    def _build_fp32(self, target: Path) -> None:
        raise NotImplementedError

    def _build_details(self) -> dict[str, Any]:
        raise NotImplementedError

    def _load_tokenizer(self) -> Any:
        raise NotImplementedError

    def _prepare(self) -> None:
        """What the first session needs beside its file (called under the load lock)."""
        self._tokenizer = self._load_tokenizer()

    def _session(self, threads: int) -> Any:
        session = self._sessions.get(threads)
        if session is not None:
            return session
        with self._load_lock:
            if threads not in self._sessions:
                if self._tokenizer is None:
                    self._prepare()
                self._sessions[threads] = self._open_session(threads)
            return self._sessions[threads]

    def _open_session(self, threads: int) -> Any:
        """A session over the cached file; a cached file ONNX Runtime refuses is rebuilt once."""
        path = self._cached_file(self.inference)
        try:
            return new_session(path, threads)
        except Exception:
            pass  # a stale or damaged file the checksum did not catch (another ONNX Runtime wrote it)
        path = self._cached_file(self.inference, rebuild=True)
        try:
            return new_session(path, threads)
        except Exception as e:
            raise ModelUnavailable(
                f"ONNX Runtime cannot load {path}: {type(e).__name__}: {e}", model_file=str(path)
            ) from e

    def _cached_file(self, inference: str, rebuild: bool = False) -> Path:
        """The cached ONNX file of a path, (re)built when missing, damaged or ``rebuild``."""
        path, stamp = self._cache_entry(inference)
        if not rebuild and stamp_matches(path, stamp):
            self._model_file = path
            return path
        try:
            self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            if inference == "fp32":
                write_atomic(path, self._build_fp32)
            else:
                source = self._cached_file("fp32")
                quantize = quantize_dynamic if inference == "int8" else quantize_blockwise
                write_atomic(path, lambda tmp: quantize(source, tmp))
            stamp["sha256"] = file_sha256(path)
            write_atomic(stamp_path(path), lambda tmp: tmp.write_text(json.dumps(stamp, sort_keys=True)))
        except ModelUnavailable:
            raise
        except Exception as e:  # the weights' errors, onnx's checker, a full disk: one typed error
            raise ModelUnavailable(
                f"cannot build the ONNX model in {self.cache_dir}: {type(e).__name__}: {e}", **self._build_details()
            ) from e
        self._model_file = path
        return path

    def _feeds(self, encodings: list[Any]) -> dict[str, np.ndarray]:
        """The encodings padded to the longest (``_pad_id``) with their attention mask."""
        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._takes_token_types:
            types = np.zeros((len(encodings), width), dtype=np.int64)
            for row, e in enumerate(encodings):
                types[row, : len(e.ids)] = e.type_ids
            feeds["token_type_ids"] = types
        return feeds

    def _run(self, session: Any, output: str, encodings: list[Any]) -> np.ndarray:
        try:
            (out,) = session.run([output], self._feeds(encodings))
        except Exception as e:  # onnxruntime's Fail, RuntimeError, an allocation failure: one typed error
            raise ModelUnavailable(
                f"ONNX Runtime inference failed: {type(e).__name__}: {e}", model_file=str(self._model_file)
            ) from e
        return np.ascontiguousarray(out, dtype=np.float32)


def load_tokenizer(directory: Path, max_length: int, **details: Any) -> Any:
    """``directory``'s ``tokenizer.json`` through the Rust ``tokenizers`` package, unpadded (a batch
    pads to its longest text) and truncated longest-first at ``max_length``; ModelUnavailable
    with ``details`` if it cannot be read."""
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(directory / TOKENIZER_FILE))
    except Exception as e:  # OSError, or the Rust parser's Exception on a bad file
        raise ModelUnavailable(f"cannot load the tokenizer: {type(e).__name__}: {e}", **details) from e
    tokenizer.no_padding()  # tokenizer.json may ship fixed padding (MiniLM's: 128)
    tokenizer.enable_truncation(max_length=max_length, strategy="longest_first")
    return tokenizer


def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def stamp_matches(path: Path, stamp: dict[str, Any]) -> bool:
    try:
        recorded = json.loads(stamp_path(path).read_text(encoding="utf-8"))
        return bool(recorded == {**stamp, "sha256": file_sha256(path)})
    except (OSError, ValueError, TypeError):
        return False


def write_atomic(target: Path, write: Any) -> None:
    """``write(tmp)`` into an owner-only temporary file beside ``target``, then rename it into place:
    a reader sees the old file or the whole new one, never half of one."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")  # mode 0600
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, 0o600)  # writers that replace the file may not keep mkstemp's mode
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


# MatMulNBits' settings for int8-blockwise: 8-bit symmetric blocks of 32 (blocks of 128 were
# faster by 10 % and further from fp32: cosine 0.9987 against 0.9995), accuracy level 4 (int8
# compute; level 1 dequantizes to fp32 and was 3x slower per query here).
BLOCKWISE = {"bits": 8, "block_size": 32, "is_symmetric": True, "accuracy_level": 4}


def quantize_dynamic(source: Path, target: Path) -> None:
    """Dynamic int8 quantization (int8 weights per output channel, uint8 activations quantized at
    run time) of the MatMuls and the embedding Gathers."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantizer logs a "consider pre-processing" warning on the root logger
    try:
        quantize_dynamic(str(source), str(target), per_channel=True, weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)


def quantize_blockwise(source: Path, target: Path) -> None:
    """Weight-only int8 in blocks (``BLOCKWISE``) of every MatMul with a constant weight."""
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer_log = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = quantizer_log.level
    quantizer_log.setLevel(logging.ERROR)  # an INFO line per node it skips
    try:
        quantizer = MatMulNBitsQuantizer(onnx.load(str(source)), **BLOCKWISE)
        quantizer.process()
        onnx.save_model(quantizer.model.model, str(target))
    finally:
        quantizer_log.setLevel(level)


def new_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: its warnings would reach a daemon's stderr
    # Workers that spin between ops hold a core another process (or our query thread) needs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
