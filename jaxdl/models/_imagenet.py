"""The vDNN paper's ImageNet networks: AlexNet, OverFeat, VGG-11/16/19, GoogLeNet.

Layer names, shapes and forward computations follow torchvision (`features.0.weight`,
`classifier.1.weight`, GoogLeNet's `inception3a.branch2.1.conv.weight`, ...);
OverFeat, which torchvision lacks, is the "fast" model of Sermanet et al. (2014)
laid out the same way. Each architecture is written once against a layer namespace
(`nn`, `F`, `cat`), so the jaxdl model and its PyTorch twin (torchvision is not a
dependency) are built from the same description with their own layers.

`width` scales every channel and hidden size (1.0 is the published network; tests
use small widths). Paper input sizes: AlexNet 227, OverFeat 231, VGG and GoogLeNet 224.
"""

import functools
import types

import jax.numpy as jnp

from jaxdl import nn as jnn
from jaxdl._extras import require
from jaxdl.models._registry import register_model

VGG_CONFIGS = {
    11: [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    16: [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    19: [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
         512, 512, 512, 512, "M"],
}

# GoogLeNet inception blocks: (ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj).
INCEPTION = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64),
    "4c": (128, 128, 256, 24, 64, 64), "4d": (112, 144, 288, 32, 64, 64),
    "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}


def _scaled(width):
    return lambda c: max(1, round(c * width))


def _define(nn, F, cat):  # noqa: N803 - `nn`/`F` as in model code
    """The architectures over one framework's layers; returns a namespace of classes."""

    def classifier(in_features, hidden, num_classes, dropout, dropout_first):
        """torchvision's AlexNet (dropout first) or VGG (dropout after each ReLU) head."""
        if dropout_first:
            return nn.Sequential(
                nn.Dropout(dropout), nn.Linear(in_features, hidden), nn.ReLU(inplace=True),
                nn.Dropout(dropout), nn.Linear(hidden, hidden), nn.ReLU(inplace=True),
                nn.Linear(hidden, num_classes))
        return nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(dropout),
            nn.Linear(hidden, num_classes))

    class _FeaturesClassifier(nn.Module):
        def forward(self, x):
            x = self.avgpool(self.features(x))
            return self.classifier(x.reshape(x.shape[0], -1))

    class AlexNet(_FeaturesClassifier):
        def __init__(self, num_classes=1000, dropout=0.5, width=1.0):
            super().__init__()
            c = _scaled(width)
            self.features = nn.Sequential(
                nn.Conv2d(3, c(64), 11, stride=4, padding=2), nn.ReLU(True),
                nn.MaxPool2d(3, 2),
                nn.Conv2d(c(64), c(192), 5, padding=2), nn.ReLU(True), nn.MaxPool2d(3, 2),
                nn.Conv2d(c(192), c(384), 3, padding=1), nn.ReLU(True),
                nn.Conv2d(c(384), c(256), 3, padding=1), nn.ReLU(True),
                nn.Conv2d(c(256), c(256), 3, padding=1), nn.ReLU(True), nn.MaxPool2d(3, 2))
            self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
            self.classifier = classifier(c(256) * 36, c(4096), num_classes, dropout, True)

    class OverFeat(_FeaturesClassifier):
        """OverFeat "fast" (231x231 input); fc6-8 as Linear layers over 6x6 features."""

        def __init__(self, num_classes=1000, dropout=0.5, width=1.0):
            super().__init__()
            c = _scaled(width)
            self.features = nn.Sequential(
                nn.Conv2d(3, c(96), 11, stride=4), nn.ReLU(True), nn.MaxPool2d(2, 2),
                nn.Conv2d(c(96), c(256), 5), nn.ReLU(True), nn.MaxPool2d(2, 2),
                nn.Conv2d(c(256), c(512), 3, padding=1), nn.ReLU(True),
                nn.Conv2d(c(512), c(1024), 3, padding=1), nn.ReLU(True),
                nn.Conv2d(c(1024), c(1024), 3, padding=1), nn.ReLU(True), nn.MaxPool2d(2, 2))
            self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
            self.classifier = nn.Sequential(
                nn.Dropout(dropout), nn.Linear(c(1024) * 36, c(3072)), nn.ReLU(True),
                nn.Dropout(dropout), nn.Linear(c(3072), c(4096)), nn.ReLU(True),
                nn.Linear(c(4096), num_classes))

    class VGG(_FeaturesClassifier):
        def __init__(self, depth=16, num_classes=1000, dropout=0.5, width=1.0):
            super().__init__()
            c = _scaled(width)
            layers, channels = [], 3
            for v in VGG_CONFIGS[depth]:
                if v == "M":
                    layers.append(nn.MaxPool2d(2, 2))
                else:
                    layers += [nn.Conv2d(channels, c(v), 3, padding=1), nn.ReLU(True)]
                    channels = c(v)
            self.features = nn.Sequential(*layers)
            self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
            self.classifier = classifier(c(512) * 49, c(4096), num_classes, dropout, False)

    class BasicConv2d(nn.Module):
        def __init__(self, in_channels, out_channels, **kwargs):
            super().__init__()
            self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
            self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

        def forward(self, x):
            return F.relu(self.bn(self.conv(x)))

    class Inception(nn.Module):
        def __init__(self, in_channels, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
            super().__init__()
            self.branch1 = BasicConv2d(in_channels, ch1x1, kernel_size=1)
            self.branch2 = nn.Sequential(BasicConv2d(in_channels, ch3x3red, kernel_size=1),
                                         BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1))
            # torchvision's "5x5" branch uses a 3x3 kernel (its known, kept quirk).
            self.branch3 = nn.Sequential(BasicConv2d(in_channels, ch5x5red, kernel_size=1),
                                         BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1))
            self.branch4 = nn.Sequential(nn.MaxPool2d(3, stride=1, padding=1, ceil_mode=True),
                                         BasicConv2d(in_channels, pool_proj, kernel_size=1))

        def forward(self, x):
            return cat([self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)])

    class InceptionAux(nn.Module):
        def __init__(self, in_channels, num_classes, dropout=0.7, width=1.0):
            super().__init__()
            c = _scaled(width)
            self.conv = BasicConv2d(in_channels, c(128), kernel_size=1)
            self.fc1 = nn.Linear(c(128) * 16, c(1024))
            self.fc2 = nn.Linear(c(1024), num_classes)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            x = self.conv(F.adaptive_avg_pool2d(x, (4, 4)))
            x = F.relu(self.fc1(x.reshape(x.shape[0], -1)))
            return self.fc2(self.dropout(x))

    class GoogLeNet(nn.Module):
        """torchvision's GoogLeNet (transform_input=False); aux heads only with aux_logits=True,
        returning (logits, aux2, aux1) in training mode like torchvision's GoogLeNetOutputs."""

        def __init__(self, num_classes=1000, aux_logits=False, dropout=0.2, dropout_aux=0.7,
                     width=1.0):
            super().__init__()
            c = _scaled(width)
            self.aux_logits = aux_logits
            self.conv1 = BasicConv2d(3, c(64), kernel_size=7, stride=2, padding=3)
            self.maxpool1 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
            self.conv2 = BasicConv2d(c(64), c(64), kernel_size=1)
            self.conv3 = BasicConv2d(c(64), c(192), kernel_size=3, padding=1)
            self.maxpool2 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
            channels, out = c(192), {}
            for name, sizes in INCEPTION.items():
                sizes = [c(s) for s in sizes]
                setattr(self, f"inception{name}", Inception(channels, *sizes))
                channels = out[name] = sizes[0] + sizes[2] + sizes[4] + sizes[5]
                if name == "3b":
                    self.maxpool3 = nn.MaxPool2d(3, stride=2, ceil_mode=True)
                elif name == "4e":
                    self.maxpool4 = nn.MaxPool2d(2, stride=2, ceil_mode=True)
            if aux_logits:
                self.aux1 = InceptionAux(out["4a"], num_classes, dropout_aux, width)
                self.aux2 = InceptionAux(out["4d"], num_classes, dropout_aux, width)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.dropout = nn.Dropout(dropout)
            self.fc = nn.Linear(channels, num_classes)

        def forward(self, x):
            x = self.maxpool1(self.conv1(x))
            x = self.maxpool2(self.conv3(self.conv2(x)))
            x = self.maxpool3(self.inception3b(self.inception3a(x)))
            x = self.inception4a(x)
            aux1 = self.aux1(x) if self.aux_logits and self.training else None
            x = self.inception4d(self.inception4c(self.inception4b(x)))
            aux2 = self.aux2(x) if self.aux_logits and self.training else None
            x = self.maxpool4(self.inception4e(x))
            x = self.avgpool(self.inception5b(self.inception5a(x)))
            x = self.fc(self.dropout(x.reshape(x.shape[0], -1)))
            return (x, aux2, aux1) if aux1 is not None else x

    return types.SimpleNamespace(AlexNet=AlexNet, OverFeat=OverFeat, VGG=VGG,
                                 GoogLeNet=GoogLeNet)


JAXDL = _define(jnn, jnn.functional, lambda xs: jnp.concatenate(xs, axis=1))


@functools.cache
def _torch_classes():
    torch = require("torch", "torch", "the PyTorch twins of the ImageNet models")

    return _define(torch.nn, torch.nn.functional, lambda xs: torch.cat(xs, 1))


def _twin(name, **fixed):
    return lambda **kwargs: getattr(_torch_classes(), name)(**fixed, **kwargs)


@register_model("alexnet", torch_twin=_twin("AlexNet"), description="AlexNet (torchvision)")
def alexnet(num_classes=1000, dropout=0.5, width=1.0):
    return JAXDL.AlexNet(num_classes, dropout, width)


@register_model("overfeat", torch_twin=_twin("OverFeat"), description="OverFeat fast")
def overfeat(num_classes=1000, dropout=0.5, width=1.0):
    return JAXDL.OverFeat(num_classes, dropout, width)


def _vgg(depth):
    @register_model(f"vgg{depth}", torch_twin=_twin("VGG", depth=depth),
                    description=f"VGG-{depth} (torchvision, no batch norm)")
    def build(num_classes=1000, dropout=0.5, width=1.0):
        return JAXDL.VGG(depth, num_classes, dropout, width)

    build.__name__ = build.__qualname__ = f"vgg{depth}"
    return build


vgg11, vgg16, vgg19 = _vgg(11), _vgg(16), _vgg(19)


@register_model("googlenet", torch_twin=_twin("GoogLeNet"), description="GoogLeNet (torchvision)")
def googlenet(num_classes=1000, aux_logits=False, dropout=0.2, dropout_aux=0.7, width=1.0):
    return JAXDL.GoogLeNet(num_classes, aux_logits, dropout, dropout_aux, width)
