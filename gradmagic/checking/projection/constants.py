"""Projection mode's tuning constants, each with what it is for (one place to read and change them)."""

#: A direction fails when its error exceeds this many times the noise floor.
NOISE_MARGIN = 30.0
#: ... and this many times the root-sum-square of the custom gradient's own rounding (`precision.gradient_rounding`).
GRADIENT_MARGIN = 3.0
#: ... and this many machine epsilons: of the float the probes' long dot products run in (float64 where the op's own
#: float is narrower, `Prober`: the op's rounding is in the measured noise); block probes, float32's at least (what
#: they allow a block whose elements straddle a kink).
EPSILON_FLOOR = 1e3
#: Directions measured at a second step size too, for the truncation error.
RICHARDSON = 1
#: A noise floor above this leaves finite differences unable to judge (a discontinuous forward): a warning ...
UNJUDGEABLE_NOISE = 1e-2
#: ... or above this many times the floor of a smooth op in the precision they run in, eps^(2/3) (truncation and
#: rounding at the step eps^(1/3)): about 1 % in float16, 4 % in bfloat16, which is their smooth ops' own noise.
SMOOTH_FLOORS = 10
#: The custom gradient and autodiff's, both computed in the op's float, may differ by this many of its roundings of
#: their magnitude before autodiff names an element a suspect (`Locator.by_reference`).
REFERENCE_ROUNDINGS = 64
#: Located elements reported at most.
LOCATED = 8
#: Elements of a spread error measured besides its worst (`Locator.samples`).
SAMPLED = 3
#: Blocks when the error is spread over many elements.
BLOCKS = 16
#: Largest base of the digit code.
MAX_BASE = 1024
#: Points evaluated in one call, in elements of z: bounds the memory of a measurement at millions of elements.
CALL_ELEMENTS = 2**23
#: A single element whose gradient may be off by more than this (relative) unseen is noted; by more than the second,
#: a warning.
SINGLE_ELEMENT_NOTE = 0.01
SINGLE_ELEMENT_WARNING = 0.1
#: Calls the narrowing of failing blocks may take in a check (`BlockProbes._narrowed`), each measuring BLOCKS parts or
#: elements.
NARROWING_CALLS = 24
#: A block fails when its mismatch exceeds this many times its noise (a worst-case rounding bound already): a false
#: alarm only costs the block's measurement element by element, where full mode's tolerances judge.
BLOCK_MARGIN = 4.0
#: A block's one-sided differences may disagree by this share of its first-order change before it counts as holding
#: a kink (smooth forwards: about the relative step times f''/f').
KINK_SHARE = 0.05
#: Outputs evaluated, in all, by the block probes that look for a single wrong element (`BlockProbes`), and per call.
BLOCK_BUDGET = 2**25
BLOCK_CALL_VALUES = 2**22
#: Elements of a slice when N-sized sums are taken a slice at a time.
TOTALS_SLICE = 1 << 20
#: Elements whose median gradient step stands for a typical element's (a regular sample of them, beyond this many).
RESOLUTION_SAMPLE = 2**16
#: The quantile of the elements' gradient steps |g_i h_i| that the block probes are sized for, and the resolution
#: stated for: all but this share of the elements (those of the smallest gradients) are judged as finely.
SMALL = 0.05


#: Elements at the edge of the forward's domain that projection mode finds and leaves out, at most.
EDGE_ELEMENTS = 64

#: Upstream vectors kept for later checks up to this many elements.
KEPT_UPSTREAM = 1 << 21
