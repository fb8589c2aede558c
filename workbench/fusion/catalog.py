"""The step catalog: every graph change either engine makes, in one table.

Each row says what a step matches (in words and as an op pattern), the op it
emits, what must run before it and why, what it saves, and which engines
implement it. Clean-ups are steps too, so no change goes unexplained. The
order of :data:`CATALOG` is the display order; each engine runs its own
steps in its own order (see ``engines.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One row of the catalog.

    Attributes:
        name: short id used in plans, CLI ``--disable`` and JSON.
        title: human title.
        matches: what the step looks for, in plain words.
        pattern: the op pattern it rewrites, as text.
        emits: the op type it produces ("" for clean-ups).
        prerequisites: steps that must run first, for this step to match.
        effect: what it costs or saves.
        engines: engines that implement it ("ort", "onnxscript", or "workbench" for
            this project's own onnxscript rules in ``workbench/fusion/rules``,
            which run inside the chain(s) that list them: ``sdpa_attention`` in
            the ort chain, ``standard_attention`` in both).
        kind: "fusion" or "cleanup".
        default_on: False for steps the engine itself leaves off by default
            (they change numerics or target one device).
        in_bert: False for patterns a BERT encoder does not contain (rotary
            embeddings, RMS norm, grouped-query attention).
        session: ONNX Runtime's own session-level graph transformers that
            redo this step when a session is created at level "extended" or
            "all" (names as ``InferenceSession(disabled_optimizers=...)``
            takes them). A step switched off must switch these off too, or
            the session silently fuses it again.
    """

    name: str
    title: str
    matches: str
    pattern: str
    emits: str
    prerequisites: tuple[str, ...]
    effect: str
    engines: tuple[str, ...]
    kind: str = "fusion"
    default_on: bool = True
    in_bert: bool = True
    session: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "matches": self.matches, "pattern": self.pattern,
                "emits": self.emits, "prerequisites": list(self.prerequisites), "effect": self.effect,
                "engines": list(self.engines), "kind": self.kind, "default_on": self.default_on,
                "in_bert": self.in_bert, "session": list(self.session)}


ORT, OS = "ort", "onnxscript"

CATALOG: tuple[Step, ...] = (
    Step("ort_basic", "ONNX Runtime basic graph optimizations",
         "constant sub-graphs, redundant casts and identities, as an ORT session at ORT_ENABLE_BASIC sees them",
         "Constant -> ... -> op  =>  initializer", "", (),
         "folds shape arithmetic into constants so later patterns see fixed shapes", (ORT,), "cleanup"),
    Step("identity_cast", "Remove Identity and useless Cast",
         "Identity nodes, Cast nodes whose input already has the target type, foldable Transpose of weights",
         "Identity(x) => x;  Cast[to=T](x:T) => x", "", (),
         "fewer nodes; exposes the real producer of each tensor to the matchers", (ORT,), "cleanup"),
    Step("gemm_to_matmul_add", "Gemm to MatMul + Add",
         "Gemm nodes (2-D linear layers)", "Gemm(x, W, b) => Add(MatMul(x, W), b)", "", (),
         "gives the attention and bias rules the MatMul + Add shape they expect", (OS,), "cleanup"),
    Step("pre_optimize", "Constant folding and shape simplification",
         "shape inference, constant folding, dead code, Shape/Gather/Concat chains that compute known sizes",
         "Shape -> Gather -> Concat => constant", "", (),
         "collapses the shape arithmetic the dynamo exporter writes around every Reshape", (OS,), "cleanup"),
    Step("layer_norm", "LayerNormalization",
         "the decomposed layer norm: mean, subtract, square, mean, add epsilon, sqrt, divide, scale, shift",
         "ReduceMean -> Sub -> Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add", "LayerNormalization", (),
         "9 element-wise kernels become 1; one pass over the activations instead of nine", (ORT,),
         session=("LayerNormFusionL1", "LayerNormFusionL2")),
    Step("simplified_layer_norm", "SimplifiedLayerNormalization (RMS norm)",
         "RMS normalization without mean subtraction (T5, LLaMA style); absent in BERT",
         "Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul", "SimplifiedLayerNormalization", (),
         "as LayerNormalization, for RMS norm", (ORT, OS), in_bert=False,
         session=("SimplifiedLayerNormFusion",)),
    Step("gelu", "Gelu",
         "the exact erf formula of GELU (ORT's step also turns the tanh formula into FastGelu)",
         "Div(sqrt2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5)", "Gelu", (),
         "5 element-wise kernels become 1 in every feed-forward block", (ORT, OS),
         session=("GeluFusionL1", "GeluFusionL2")),
    Step("reshape", "Reshape clean-up",
         "Reshape nodes whose target shape is built from Shape/Gather/Concat, and empty reshapes",
         "Shape -> Gather -> Unsqueeze -> Concat -> Reshape => Reshape(const)", "", ("identity_cast",),
         "constant reshape targets let the attention matcher read head counts", (ORT,), "cleanup"),
    Step("encoder_rms_norm", "SimplifiedLayerNormalization from a written-out RMS norm (workbench rule)",
         "RMSNorm as EuroBERT's TorchScript export writes it: x * 1/Sqrt(ReduceMean(x^2) + eps) * weight, with "
         "Div(1, .) or Reciprocal and Casts between", "Pow -> ReduceMean -> Add(eps) -> Sqrt -> Div(1, .) -> "
         "Mul(x) -> Mul(weight)  =>  SimplifiedLayerNormalization", "SimplifiedLayerNormalization", (),
         "7 element-wise kernels become 1 (onnxscript's RMS rule does not match this form)", ("workbench",),
         in_bert=False, session=("SimplifiedLayerNormFusion",)),
    Step("skip_layer_norm", "SkipLayerNormalization",
         "a residual Add feeding a LayerNormalization", "Add(x, skip) -> LayerNormalization",
         "SkipLayerNormalization", ("layer_norm",),
         "the residual add is done inside the norm kernel: one less read and write of the activations", (ORT, OS),
         session=("SkipLayerNormFusion",)),
    Step("skip_simplified_layer_norm", "SkipSimplifiedLayerNormalization",
         "a residual Add feeding an RMS norm; absent in BERT", "Add -> SimplifiedLayerNormalization",
         "SkipSimplifiedLayerNormalization", ("simplified_layer_norm",), "as SkipLayerNormalization", (ORT, OS), in_bert=False),
    Step("encoder_skip_norm", "Skip(Simplified)LayerNormalization without a bias (workbench rule)",
         "a residual Add of two activations feeding a LayerNormalization without a bias (ModernBERT) or an RMS "
         "norm (EuroBERT): both engines' rules insist on a bias, and ONNX Runtime's crashes on its absence",
         "Add(x, skip) -> LayerNormalization(gamma) | SimplifiedLayerNormalization  =>  "
         "SkipLayerNormalization(x, skip, gamma) | SkipSimplifiedLayerNormalization",
         "SkipLayerNormalization", (),
         "the residual add is done inside the norm kernel; the sum the next residual reads is its fourth output",
         ("workbench",), in_bert=False, session=("SkipLayerNormFusion",)),
    Step("encoder_rotary", "RotaryEmbedding with its cos/sin cache (workbench rule)",
         "the rotary position embedding of ModernBERT, NomicBERT, GTE and EuroBERT as both exporters write "
         "transformers' rotate_half: x * cos + Concat(-x[..., H/2:], x[..., :H/2]) * sin on [B, N, S, H] queries and "
         "keys, with cos and sin computed from the positions in every forward pass",
         "Slice, Slice -> Neg -> Concat -> Mul(sin); Mul(x, cos) -> Add  =>  "
         "com.microsoft.RotaryEmbedding(x, [0], cos_cache, sin_cache)",
         "RotaryEmbedding", (),
         "7 nodes per projection become 1 kernel and the cos/sin tables are computed once, at fusion time, for "
         "8192 positions (onnxscript finds the arithmetic but not an encoder's tables; ONNX Runtime's optimizer "
         "has no rule for these exports)",
         ("workbench",), in_bert=False),
    Step("rotary_embedding", "RotaryEmbedding",
         "rotary position embeddings (LLaMA style); absent in BERT", "Slice/Neg/Concat/Mul/Add on q and k",
         "RotaryEmbedding", (), "one kernel instead of about a dozen per projection", (ORT, OS), in_bert=False),
    Step("cse", "Common sub-expression elimination",
         "identical nodes computing the same value twice", "op(x) ... op(x) => op(x)", "", (),
         "fewer nodes; shared shape computations become one", (OS,), "cleanup"),
    Step("partial_rotary_embedding", "Partial RotaryEmbedding",
         "rotary embeddings on part of each head; absent in BERT", "Slice -> RotaryEmbedding -> Concat",
         "RotaryEmbedding", ("rotary_embedding",), "as RotaryEmbedding", (OS,), in_bert=False),
    Step("encoder_attention", "MultiHeadAttention around rotary Q and K (workbench rule)",
         "the softmax attention core of a rotary encoder, read from the tensors' shapes: Q·K^T (scale folded "
         "anywhere), plus the mask or sliding-window bias, Softmax (NaN guard or not), times V, heads merged back",
         "MatMul(Q*s, K^T*s) -> Add(bias) -> Softmax -> MatMul(V) -> Transpose -> Reshape  =>  "
         "MultiHeadAttention(Q as [B,S,N*H], K, V as [B,N,L,H], attention_bias)",
         "MultiHeadAttention", ("encoder_rotary",),
         "one kernel per layer; a local layer's window stays exact as the attention bias. Needs the rotation fused "
         "first (it only takes cores whose Q or K comes out of RotaryEmbedding; BERT's go to onnxscript's own rules)",
         ("workbench",), in_bert=False),
    Step("sdpa", "Scaled dot-product attention (intermediate)",
         "softmax(Q K^T * scale + mask) V", "MatMul(Q, Transpose(K)) -> Mul/Div -> Add(mask) -> Softmax -> MatMul(V)",
         "SDPA", (), "an intermediate op that the multi-head-attention rules build on", (OS,)),
    Step("group_query_attention", "GroupQueryAttention",
         "attention with fewer key/value heads than query heads; absent in BERT", "SDPA with repeated K/V heads",
         "GroupQueryAttention", ("sdpa",), "one kernel with a KV cache", (OS,), in_bert=False),
    Step("multi_head_attention", "MultiHeadAttention",
         "an SDPA whose Q, K and V are split into heads by Reshape/Transpose", "Reshape -> Transpose -> SDPA -> Transpose -> Reshape",
         "MultiHeadAttention", ("sdpa",), "the head split and merge move inside one kernel", (OS,)),
    Step("sdpa_attention", "Attention from exported SDPA (workbench rule)",
         "the self-attention block as the TorchScript exporter writes transformers' SDPA attention: "
         "sqrt-scale multiplied into Q and into K transposed with perm 0,2,3,1, a boolean padding mask turned "
         "into Where(mask, 0, -inf), Softmax guarded by Where(IsNaN)",
         "MatMul+Add (Q,K,V) -> Reshape -> Transpose -> Mul(scale) -> MatMul -> Add(Where(mask, 0, -inf)) -> "
         "Softmax -> Where(IsNaN) -> MatMul(V) -> Transpose -> Reshape",
         "Attention", (),
         "the pattern neither engine matches (TorchScript + sdpa): Q, K and V become one packed MatMul and about "
         "30 nodes become 1 kernel; runs in the ort chain just before ORT's own attention step",
         ("workbench",)),
    Step("standard_attention", "MultiHeadAttention from ONNX's standard Attention (workbench rule)",
         "ONNX's own Attention op (opset 23+), as the dynamo exporter writes transformers' sdpa attention, with "
         "the head split (Reshape -> Transpose 0,2,1,3) before it and the merge after it; a bool or float "
         "[B|1, 1|N, S, L] mask or none; no KV cache, is_causal, softcap or qk_matmul_output",
         "Reshape -> Transpose (Q,K,V) -> Attention(q, k, v, mask) -> Transpose -> Reshape  =>  "
         "MultiHeadAttention(q, k, v, attention_bias=Where(mask, 0, lowest))",
         "MultiHeadAttention", (),
         "the exporter's standard op becomes ONNX Runtime's contrib kernel and 8 head split/merge nodes per layer "
         "go; in the onnxscript chain the attention step can then pack Q, K and V into one contrib Attention; "
         "runs early in the ort chain (ORT's shape inference does not know the standard op)",
         ("workbench",)),
    Step("attention", "Attention",
         "the whole self-attention block: Q, K, V projections from one input, scores, mask, softmax, context",
         "MatMul+Add (Q,K,V) -> Reshape -> Transpose -> MatMul -> Div -> Add(mask) -> Softmax -> MatMul",
         "Attention", ("layer_norm", "skip_layer_norm"),
         "Q, K and V projections become one packed MatMul and about 30 nodes become 1 kernel", (ORT, OS),
         session=("AttentionFusion",)),
    Step("shape", "Shape clean-up",
         "Shape -> Gather -> Unsqueeze -> Concat chains that rebuild an input's shape",
         "Concat(Unsqueeze(Gather(Shape(x))), ...) => Shape(x)", "", (), "fewer tiny shape kernels", (ORT,), "cleanup"),
    Step("embed_layer_norm", "EmbedLayerNormalization",
         "word, position and token-type embedding Gathers, their sum, and the LayerNormalization after them",
         "Gather(word) + Gather(position) + Gather(type) -> LayerNormalization", "EmbedLayerNormalization",
         ("layer_norm", "attention"), "the embedding block becomes 1 kernel and the mask is turned into a mask index",
         (ORT,), session=("EmbedLayerNormFusion",)),
    Step("postprocess", "Post-fusion clean-up",
         "reshapes whose input and output shapes are equal, dead mask paths, unused nodes",
         "Reshape(x -> same shape) => x", "", (), "removes what the fusions left dangling", (ORT,), "cleanup"),
    Step("fast_gelu", "Gelu / FastGelu (second GELU rules)",
         "GELU written out in the forms the first rule missed: the tanh approximation (to FastGelu) and "
         "x * 0.5 * (1 + erf(x / sqrt 2)) (to Gelu)",
         "Pow(3) -> Mul(0.044715) -> Add -> Mul(sqrt(2/pi)) -> Tanh -> ...;  Mul(x) -> Mul(0.5) -> ... Erf",
         "FastGelu", (), "5 to 7 element-wise kernels become 1", (OS,), session=("FastGeluFusion",)),
    Step("encoder_silu", "QuickGelu from SiLU (workbench rule)",
         "SiLU written as x * Sigmoid(x), the gate activation of NomicBERT's and EuroBERT's SwiGLU MLP",
         "Sigmoid(x) -> Mul(x)  =>  com.microsoft.QuickGelu(x, alpha=1)", "QuickGelu", (),
         "2 kernels become 1 per layer; the gate's multiply stays a plain Mul (ONNX Runtime has no CPU kernel "
         "for a whole gated MLP)", ("workbench",), in_bert=False, session=("QuickGeluFusion",)),
    Step("bias_gelu", "BiasGelu",
         "the bias Add of the first feed-forward MatMul feeding Gelu", "Add(x, bias) -> Gelu", "BiasGelu",
         ("gelu",), "the bias add happens inside the Gelu kernel", (ORT, OS), session=("BiasGeluFusion",)),
    Step("bias_skip_layer_norm", "Bias folded into SkipLayerNormalization",
         "the bias Add of the projection before a SkipLayerNormalization", "Add(x, bias) -> SkipLayerNormalization",
         "SkipLayerNormalization", ("skip_layer_norm",), "one more element-wise kernel folded into the norm", (ORT,),
         session=("BiasSkipLayerNormFusion",)),
    Step("sdpa_to_mha", "Remaining SDPA to MultiHeadAttention",
         "SDPA intermediates no MultiHeadAttention rule consumed", "SDPA => MultiHeadAttention",
         "MultiHeadAttention", ("sdpa",), "leftover attention still runs as one kernel", (OS,)),
    Step("gelu_approximation", "Gelu approximation (FastGelu)",
         "Gelu and BiasGelu nodes; replaces exact erf GELU by the tanh approximation",
         "Gelu => FastGelu;  BiasGelu => FastGelu(bias)", "FastGelu", ("gelu",),
         "faster on GPU; changes results by about 1e-3, so off by default", (ORT,), "fusion", False),
    Step("gemm_fast_gelu", "GemmFastGelu",
         "a MatMul feeding FastGelu (GPU-oriented ROCm kernel)", "MatMul -> FastGelu", "GemmFastGelu",
         ("gelu_approximation",), "one kernel for the first feed-forward half; off by default", (ORT,), "fusion", False),
    Step("final_optimize", "Final clean-up (inline leftovers)",
         "intermediate fusion functions no later rule consumed; unused nodes", "SDPA function => its body", "", (),
         "leaves only ops ONNX Runtime knows", (OS,), "cleanup"),
    Step("ort_patterns", "ORT pattern rules (FusedMatMul, Softmax)",
         "Transpose or scale feeding MatMul; softmax and group-norm idioms",
         "Transpose -> MatMul => FusedMatMul[transA/B]", "FusedMatMul", (), "fewer transposes", (OS,)),
    Step("finalize", "Finalize",
         "unused constants and initializers; topological order; constants lifted to initializers",
         "", "", (), "a tidy graph; no change in what runs", (ORT, OS), "cleanup"),
)

BY_NAME: dict[str, Step] = {s.name: s for s in CATALOG}


def get_step(name: str) -> Step:
    """The catalog row for ``name``.

    Raises:
        FusionError: no such step, with the list of valid names.
    """
    try:
        return BY_NAME[name]
    except KeyError:
        from ..errors import FusionError
        raise FusionError(f"unknown fusion step {name!r}; steps are: {', '.join(BY_NAME)}") from None


def session_optimizers_off(disabled) -> tuple[str, ...]:
    """ONNX Runtime session transformers to switch off so that ``disabled`` steps stay off in a session.

    Pass the result as ``disabled_optimizers`` when creating a session at
    level "extended" or "all": otherwise the session fuses those patterns
    again and a measurement credits the step with nothing.
    """
    names: list[str] = []
    for name in sorted(set(disabled)):
        step = BY_NAME.get(name)
        for o in step.session if step else ():
            if o not in names:
                names.append(o)
    return tuple(names)
