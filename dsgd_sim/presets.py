"""Well-known models as workloads: per-layer gradient sizes and per-layer compute shares.

Parameter counts come from the architectures themselves, built here layer by layer, and match the
published totals: ResNet-50 25,557,032 (He et al., CVPR 2016; torchvision's ``resnet50``),
VGG-16 138,357,544 (Simonyan & Zisserman, ICLR 2015; torchvision's ``vgg16``), BERT-large
335,141,888 with pooler (Devlin et al., NAACL 2019, who round it to 340M).

Per-step compute times are *estimates*, not measurements: training FLOPs per sample are three
times the forward FLOPs (backward ≈ 2× forward; Kaplan et al. 2020), forward FLOPs are counted
from the layers below (2 FLOPs per multiply-add), and the step runs at a sustained
``SUSTAINED_FLOPS`` = 8 TFLOP/s, about what a V100 reaches training ResNet-50 in fp32. ResNet-50
at batch 32 comes out at 0.0987 s per step (324 images/s); VGG-16 at batch 32 at 0.371 s;
BERT-large at 8 sequences of 512 tokens at 1.005 s. Use ``--compute`` or a measured
``--profile`` for a given machine. Each layer's backward time is its share of the FLOPs, so the
early, compute-heavy convolutions finish their gradients last, as in a real backward pass.
"""

from __future__ import annotations

from dataclasses import dataclass

SUSTAINED_FLOPS = 8e12
BYTES_PER_PARAM = 4  # fp32 gradients


@dataclass(frozen=True)
class LayerSpec:
    """One layer: its parameter count and its forward FLOPs per sample."""

    name: str
    params: int
    forward_flops: float


def _conv(name, c_in, c_out, k, out_hw, bias=False):
    params = c_in * c_out * k * k + (c_out if bias else 0)
    return LayerSpec(name, params, 2.0 * c_in * c_out * k * k * out_hw * out_hw)


def _bn(name, channels, hw):
    return LayerSpec(name, 2 * channels, 4.0 * channels * hw * hw)


def _linear(name, d_in, d_out, tokens=1):
    return LayerSpec(name, d_in * d_out + d_out, 2.0 * d_in * d_out * tokens)


def resnet50_layers() -> list[LayerSpec]:
    layers = [_conv("conv1", 3, 64, 7, 112), _bn("bn1", 64, 112)]
    c_in, hw = 64, 56
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for block in range(blocks):
            stride = 2 if block == 0 and stage > 1 else 1
            out_hw = hw // stride
            p = f"layer{stage}.{block}"
            layers += [_conv(f"{p}.conv1", c_in, width, 1, hw), _bn(f"{p}.bn1", width, hw),
                       _conv(f"{p}.conv2", width, width, 3, out_hw), _bn(f"{p}.bn2", width, out_hw),
                       _conv(f"{p}.conv3", width, 4 * width, 1, out_hw),
                       _bn(f"{p}.bn3", 4 * width, out_hw)]
            if block == 0:
                layers += [_conv(f"{p}.downsample", c_in, 4 * width, 1, out_hw),
                           _bn(f"{p}.downsample.bn", 4 * width, out_hw)]
            c_in, hw = 4 * width, out_hw
    return layers + [_linear("fc", 2048, 1000)]


def vgg16_layers() -> list[LayerSpec]:
    plan = [(64, 224), (64, 224), (128, 112), (128, 112), (256, 56), (256, 56), (256, 56),
            (512, 28), (512, 28), (512, 28), (512, 14), (512, 14), (512, 14)]
    layers, c_in = [], 3
    for i, (c_out, hw) in enumerate(plan):
        layers.append(_conv(f"features.conv{i}", c_in, c_out, 3, hw, bias=True))
        c_in = c_out
    return layers + [_linear("classifier.fc1", 512 * 7 * 7, 4096),
                     _linear("classifier.fc2", 4096, 4096), _linear("classifier.fc3", 4096, 1000)]


def bert_large_layers(seq_len: int = 512) -> list[LayerSpec]:
    hidden, ffn, vocab = 1024, 4096, 30522
    layers = [LayerSpec("embeddings", (vocab + 512 + 2) * hidden + 2 * hidden, 0.0)]
    attention_scores = 4.0 * seq_len * seq_len * hidden  # QK^T and softmax·V, per sequence
    for i in range(24):
        p = f"encoder.{i}"
        layers += [
            LayerSpec(f"{p}.attention", 4 * (hidden * hidden + hidden),
                      2.0 * 4 * hidden * hidden * seq_len + attention_scores),
            LayerSpec(f"{p}.attention.norm", 2 * hidden, 0.0),
            _linear(f"{p}.ffn.in", hidden, ffn, seq_len),
            _linear(f"{p}.ffn.out", ffn, hidden, seq_len),
            LayerSpec(f"{p}.ffn.norm", 2 * hidden, 0.0),
        ]
    return layers + [_linear("pooler", hidden, hidden)]


@dataclass(frozen=True)
class Preset:
    """A named model: layers, per-replica batch (samples per step) and where the numbers come from."""

    name: str
    layers: tuple[LayerSpec, ...]
    batch_size: int
    source: str

    @property
    def params(self) -> int:
        return sum(layer.params for layer in self.layers)

    @property
    def step_time_s(self) -> float:
        """Estimated forward + backward seconds for one step (see the module docstring)."""
        flops = 3.0 * sum(layer.forward_flops for layer in self.layers) * self.batch_size
        return flops / SUSTAINED_FLOPS


PRESETS = {
    "resnet50": Preset("resnet50", tuple(resnet50_layers()), 32,
                       "He et al. 2016; 25,557,032 parameters as torchvision's resnet50"),
    "vgg16": Preset("vgg16", tuple(vgg16_layers()), 32,
                    "Simonyan & Zisserman 2015; 138,357,544 parameters as torchvision's vgg16"),
    "bert-large": Preset("bert-large", tuple(bert_large_layers()), 8,
                         "Devlin et al. 2019; 24 layers, hidden 1024, sequence 512, with pooler"),
}
DEFAULT_PRESET = "resnet50"
