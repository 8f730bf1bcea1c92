"""What a quantized layer stores: integer codes with scales, at some granularity, and what outliers do to them.

The cost model (:mod:`stage5.quantization`) needs only bytes per number. This module is for chapter 8's look
inside: symmetric round-to-nearest quantization with one scale per tensor, per row or per group of columns;
SmoothQuant's migration of activation outliers into the weights (Xiao et al., ICML 2023, cite key
xiao2023smoothquant, section 4: s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)); and the two FP8 encodings
(Micikevicius et al., arXiv:2209.05433, cite key micikevicius2022fp8: E5M2 keeps IEEE 754's infinities and NaNs,
E4M3 gives them up, keeping one NaN pattern, to reach 448).

numpy only, small and exact: a demonstration of the mechanisms, not a quantization library.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from stage5 import inputs


def quantize(x: np.ndarray, bits: int, granularity: str | int = "tensor") -> np.ndarray:
    """``x`` (2-D) rounded to signed ``bits``-bit integers and scaled back (symmetric, absmax, round-to-nearest).

    ``granularity``: "tensor" (one scale), "row" (one per row: per token for activations of shape
    tokens x channels, per output channel for weights of shape out x in) or an int g (one scale per g
    consecutive columns of each row: group-wise, as GPTQ and AWQ store INT4 weights).
    """
    b = inputs.integer(bits, "bits", minimum=2, maximum=16)
    a = _checked(x)
    qmax = 2 ** (b - 1) - 1
    view = _groups(a, granularity)
    scale = np.abs(view).max(axis=-1, keepdims=True) / qmax
    scale = np.where(scale == 0, 1.0, scale)  # an all-zero group stays zero
    return (np.clip(np.round(view / scale), -qmax, qmax) * scale).reshape(a.shape)


def _groups(a: np.ndarray, granularity: str | int) -> np.ndarray:
    if granularity == "tensor":
        return a.reshape(1, 1, -1)
    if granularity == "row":
        return a.reshape(a.shape[0], 1, -1)
    if isinstance(granularity, int) and not isinstance(granularity, bool) and granularity > 0:
        if a.shape[1] % granularity:
            raise ValueError(f"group size {granularity} must divide the {a.shape[1]} columns")
        return a.reshape(a.shape[0], -1, granularity)
    raise ValueError(f"granularity must be 'tensor', 'row' or a positive group size, got {granularity!r}")


def quantize_float(x: np.ndarray, fmt: FloatFormat, granularity: str | int = "tensor") -> np.ndarray:
    """``x`` (2-D) scaled so each group's largest magnitude maps to ``fmt.max``, rounded to the nearest number
    ``fmt`` can hold (subnormals included, ties to even) and scaled back."""
    a = _checked(x)
    view = _groups(a, granularity)
    scale = np.abs(view).max(axis=-1, keepdims=True) / fmt.max
    scale = np.where(scale == 0, 1.0, scale)
    v = view / scale
    exponent = np.floor(np.log2(np.maximum(np.abs(v), fmt.min_normal)))  # below min normal: subnormal spacing
    step = 2.0 ** (exponent - fmt.mantissa_bits)
    q = np.clip(np.round(v / step) * step, -fmt.max, fmt.max)
    return (q * scale).reshape(a.shape)


def _checked(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    if a.ndim != 2 or a.size == 0 or not np.all(np.isfinite(a)):
        raise ValueError(f"quantize takes a non-empty finite 2-D array, got shape {a.shape}")
    return a


def relative_error(exact: np.ndarray, approx: np.ndarray) -> float:
    """Frobenius norm of the difference over that of ``exact``."""
    e = inputs.reals(exact, "exact", high=1e150)  # squares of larger entries overflow the norm
    a = inputs.reals(approx, "approx", high=1e150)
    if e.shape != a.shape or not np.any(e):
        raise inputs.InputError(f"exact and approx must be arrays of one shape, exact not all zero; got {e.shape} "
                                f"and {a.shape}")
    return float(np.linalg.norm(e - a) / np.linalg.norm(e))


def smooth(x: np.ndarray, w: np.ndarray, alpha: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """SmoothQuant's migration for y = x @ w.T (x: tokens x in, w: out x in): divide each input channel j of x by
    s_j = max|x_j|^alpha / max|w_j|^(1 - alpha) and multiply column j of w by it. The product is unchanged;
    the outliers' range moves from the activations into the weights."""
    a = inputs.real(alpha, "alpha (migration strength)", low=0.0, high=1.0)
    x, w = inputs.reals(x, "x (activations)", low=-1e150, high=1e150), inputs.reals(w, "w (weights)", low=-1e150,
                                                                                     high=1e150)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise inputs.InputError(f"x (tokens x in) and w (out x in) must be matrices sharing their inputs, got shapes "
                                f"{x.shape} and {w.shape}")
    s = np.abs(x).max(axis=0) ** a / np.maximum(np.abs(w).max(axis=0), 1e-12) ** (1 - a)
    s = np.where(s == 0, 1.0, s)
    return x / s, w * s


@dataclass(frozen=True)
class FloatFormat:
    """An 8-bit float encoding, from its bit layout: 1 sign bit, ``exponent_bits``, ``mantissa_bits``."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    ieee_specials: bool  # True: the top exponent is reserved for inf and NaN, as in IEEE 754

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def max(self) -> float:
        top = 2 ** self.exponent_bits - 1
        if self.ieee_specials:  # the top exponent is inf/NaN: the largest finite uses the one below, all ones
            return (2 - 2.0 ** -self.mantissa_bits) * 2.0 ** (top - 1 - self.bias)
        # the top exponent holds numbers too; only all-ones mantissa there is NaN
        return (2 - 2.0 ** (1 - self.mantissa_bits)) * 2.0 ** (top - self.bias)

    @property
    def min_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.mantissa_bits)

    @property
    def relative_step(self) -> float:
        """Spacing of neighbouring normal numbers relative to their size, at most: 2^-mantissa_bits."""
        return 2.0 ** -self.mantissa_bits


E4M3 = FloatFormat("E4M3", 4, 3, ieee_specials=False)
E5M2 = FloatFormat("E5M2", 5, 2, ieee_specials=True)


def scale_bits_per_weight(group: int, scale_bits: int = 16) -> float:
    """Extra bits per weight that a group-wise format spends on its scales: one ``scale_bits`` scale per group."""
    return inputs.positive_int(scale_bits, "scale_bits") / inputs.positive_int(group, "group")
