"""The rows of the catalog: what a step is, in words, and the rows of the engines' own steps.

:class:`Step` is one row: what a step matches (in words and as an op pattern), the op it emits, what
must run before it and why, what it saves. :data:`ENGINE_ROWS` holds the rows of ONNX Runtime's and
onnxscript's own steps; a workbench rule carries its row itself (``rule.Rule``). ``catalog.py``
shows them all, in display order, as the registry has them.
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
        engines: the chains whose engine runs it ("ort", "onnxscript"), read
            from the chains; ("workbench",) for a workbench rule
            (``fusion/rules``), which runs inside the chains it names.
        alternative_to: the step whose fused op this step runs on another
            kernel, for the same answers ("attention": its packed Attention
            as MultiHeadAttention or ONNX's standard Attention); "" for none.
            Such a step is off by default and needs that step on: an
            ablation tries each alternative on top of it and keeps the
            fastest (``catalog.alternatives``).
    """

    name: str
    title: str
    matches: str
    pattern: str
    emits: str
    prerequisites: tuple[str, ...]
    effect: str
    kind: str = "fusion"
    default_on: bool = True
    in_bert: bool = True
    session: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    alternative_to: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "matches": self.matches, "pattern": self.pattern,
                "emits": self.emits, "prerequisites": list(self.prerequisites), "effect": self.effect,
                "engines": list(self.engines), "kind": self.kind, "default_on": self.default_on,
                "in_bert": self.in_bert, "session": list(self.session), "alternative_to": self.alternative_to}


#: The rows of the engines' own steps (ONNX Runtime's optimizer, onnxscript's rule groups).
ENGINE_ROWS: tuple[Step, ...] = (
    Step("ort_basic", "ONNX Runtime basic graph optimizations",
         "constant sub-graphs, redundant casts and identities, as an ORT session at ORT_ENABLE_BASIC sees them",
         "Constant -> ... -> op  =>  initializer", "", (),
         "folds shape arithmetic into constants so later patterns see fixed shapes", "cleanup"),
    Step("identity_cast", "Remove Identity and useless Cast",
         "Identity nodes, Cast nodes whose input already has the target type, foldable Transpose of weights",
         "Identity(x) => x;  Cast[to=T](x:T) => x", "", (),
         "fewer nodes; exposes the real producer of each tensor to the matchers", "cleanup"),
    Step("gemm_to_matmul_add", "Gemm to MatMul + Add",
         "Gemm nodes (2-D linear layers)", "Gemm(x, W, b) => Add(MatMul(x, W), b)", "", (),
         "gives the attention and bias rules the MatMul + Add shape they expect", "cleanup"),
    Step("pre_optimize", "Constant folding and shape simplification",
         "shape inference, constant folding, dead code, Shape/Gather/Concat chains that compute known sizes",
         "Shape -> Gather -> Concat => constant", "", (),
         "collapses the shape arithmetic the dynamo exporter writes around every Reshape", "cleanup"),
    Step("layer_norm", "LayerNormalization",
         "the decomposed layer norm: mean, subtract, square, mean, add epsilon, sqrt, divide, scale, shift",
         "ReduceMean -> Sub -> Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul -> Add", "LayerNormalization", (),
         "9 element-wise kernels become 1; one pass over the activations instead of nine",
         session=("LayerNormFusionL1", "LayerNormFusionL2")),
    Step("simplified_layer_norm", "SimplifiedLayerNormalization (RMS norm)",
         "RMS normalization without mean subtraction (T5, LLaMA style); absent in BERT",
         "Pow -> ReduceMean -> Add -> Sqrt -> Div -> Mul", "SimplifiedLayerNormalization", (),
         "as LayerNormalization, for RMS norm", in_bert=False,
         session=("SimplifiedLayerNormFusion",)),
    Step("gelu", "Gelu",
         "the exact erf formula of GELU (ORT's step also turns the tanh formula into FastGelu)",
         "Div(sqrt2) -> Erf -> Add(1) -> Mul(x) -> Mul(0.5)", "Gelu", (),
         "5 element-wise kernels become 1 in every feed-forward block",
         session=("GeluFusionL1", "GeluFusionL2")),
    Step("reshape", "Reshape clean-up",
         "Reshape nodes whose target shape is built from Shape/Gather/Concat, and empty reshapes",
         "Shape -> Gather -> Unsqueeze -> Concat -> Reshape => Reshape(const)", "", ("identity_cast",),
         "constant reshape targets let the attention matcher read head counts", "cleanup"),
    Step("skip_layer_norm", "SkipLayerNormalization",
         "a residual Add feeding a LayerNormalization", "Add(x, skip) -> LayerNormalization",
         "SkipLayerNormalization", ("layer_norm",),
         "the residual add is done inside the norm kernel: one less read and write of the activations",
         session=("SkipLayerNormFusion",)),
    Step("skip_simplified_layer_norm", "SkipSimplifiedLayerNormalization",
         "a residual Add feeding an RMS norm; absent in BERT", "Add -> SimplifiedLayerNormalization",
         "SkipSimplifiedLayerNormalization", ("simplified_layer_norm",), "as SkipLayerNormalization", in_bert=False),
    Step("rotary_embedding", "RotaryEmbedding",
         "rotary position embeddings (LLaMA style); absent in BERT", "Slice/Neg/Concat/Mul/Add on q and k",
         "RotaryEmbedding", (), "one kernel instead of about a dozen per projection", in_bert=False),
    Step("cse", "Common sub-expression elimination",
         "identical nodes computing the same value twice", "op(x) ... op(x) => op(x)", "", (),
         "fewer nodes; shared shape computations become one", "cleanup"),
    Step("partial_rotary_embedding", "Partial RotaryEmbedding",
         "rotary embeddings on part of each head; absent in BERT", "Slice -> RotaryEmbedding -> Concat",
         "RotaryEmbedding", ("rotary_embedding",), "as RotaryEmbedding", in_bert=False),
    Step("sdpa", "Scaled dot-product attention (intermediate)",
         "softmax(Q K^T * scale + mask) V", "MatMul(Q, Transpose(K)) -> Mul/Div -> Add(mask) -> Softmax -> MatMul(V)",
         "SDPA", (), "an intermediate op that the multi-head-attention rules build on"),
    Step("group_query_attention", "GroupQueryAttention",
         "attention with fewer key/value heads than query heads; absent in BERT", "SDPA with repeated K/V heads",
         "GroupQueryAttention", ("sdpa",), "one kernel with a KV cache", in_bert=False),
    Step("multi_head_attention", "MultiHeadAttention",
         "an SDPA whose Q, K and V are split into heads by Reshape/Transpose", "Reshape -> Transpose -> SDPA -> Transpose -> Reshape",
         "MultiHeadAttention", ("sdpa",), "the head split and merge move inside one kernel"),
    Step("attention", "Attention",
         "the whole self-attention block: Q, K, V projections from one input, scores, mask, softmax, context",
         "MatMul+Add (Q,K,V) -> Reshape -> Transpose -> MatMul -> Div -> Add(mask) -> Softmax -> MatMul",
         "Attention", ("layer_norm", "skip_layer_norm"),
         "Q, K and V projections become one packed MatMul and about 30 nodes become 1 kernel",
         session=("AttentionFusion",)),
    Step("shape", "Shape clean-up",
         "Shape -> Gather -> Unsqueeze -> Concat chains that rebuild an input's shape",
         "Concat(Unsqueeze(Gather(Shape(x))), ...) => Shape(x)", "", (), "fewer tiny shape kernels", "cleanup"),
    Step("embed_layer_norm", "EmbedLayerNormalization",
         "word, position and token-type embedding Gathers, their sum, and the LayerNormalization after them",
         "Gather(word) + Gather(position) + Gather(type) -> LayerNormalization", "EmbedLayerNormalization",
         ("layer_norm", "attention"), "the embedding block becomes 1 kernel and the mask is turned into a mask index",
         session=("EmbedLayerNormFusion",)),
    Step("postprocess", "Post-fusion clean-up",
         "reshapes whose input and output shapes are equal, dead mask paths, unused nodes",
         "Reshape(x -> same shape) => x", "", (), "removes what the fusions left dangling", "cleanup"),
    Step("fast_gelu", "Gelu / FastGelu (second GELU rules)",
         "GELU written out in the forms the first rule missed: the tanh approximation (to FastGelu) and "
         "x * 0.5 * (1 + erf(x / sqrt 2)) (to Gelu)",
         "Pow(3) -> Mul(0.044715) -> Add -> Mul(sqrt(2/pi)) -> Tanh -> ...;  Mul(x) -> Mul(0.5) -> ... Erf",
         "FastGelu", (), "5 to 7 element-wise kernels become 1", session=("FastGeluFusion",)),
    Step("bias_gelu", "BiasGelu",
         "the bias Add of the first feed-forward MatMul feeding Gelu", "Add(x, bias) -> Gelu", "BiasGelu",
         ("gelu",), "the bias add happens inside the Gelu kernel", session=("BiasGeluFusion",)),
    Step("bias_skip_layer_norm", "Bias folded into SkipLayerNormalization",
         "the bias Add of the projection before a SkipLayerNormalization", "Add(x, bias) -> SkipLayerNormalization",
         "SkipLayerNormalization", ("skip_layer_norm",), "one more element-wise kernel folded into the norm",
         session=("BiasSkipLayerNormFusion",)),
    Step("sdpa_to_mha", "Remaining SDPA to MultiHeadAttention",
         "SDPA intermediates no MultiHeadAttention rule consumed", "SDPA => MultiHeadAttention",
         "MultiHeadAttention", ("sdpa",), "leftover attention still runs as one kernel"),
    Step("gelu_approximation", "Gelu approximation (FastGelu)",
         "Gelu and BiasGelu nodes; replaces exact erf GELU by the tanh approximation",
         "Gelu => FastGelu;  BiasGelu => FastGelu(bias)", "FastGelu", ("gelu",),
         "faster on GPU; changes results by about 1e-3, so off by default", "fusion", False),
    Step("gemm_fast_gelu", "GemmFastGelu",
         "a MatMul feeding FastGelu (GPU-oriented ROCm kernel)", "MatMul -> FastGelu", "GemmFastGelu",
         ("gelu_approximation",), "one kernel for the first feed-forward half; off by default", "fusion", False),
    Step("final_optimize", "Final clean-up (inline leftovers)",
         "intermediate fusion functions no later rule consumed; unused nodes", "SDPA function => its body", "", (),
         "leaves only ops ONNX Runtime knows", "cleanup"),
    Step("ort_patterns", "ORT pattern rules (FusedMatMul, Softmax)",
         "Transpose or scale feeding MatMul; softmax and group-norm idioms",
         "Transpose -> MatMul => FusedMatMul[transA/B]", "FusedMatMul", (), "fewer transposes"),
    Step("finalize", "Finalize",
         "unused constants and initializers; topological order; constants lifted to initializers",
         "", "", (), "a tidy graph; no change in what runs", "cleanup"),
)
