"""ResNet-18/50 (He et al. 2016) as torchvision builds them, and their PyTorch twins.

torchvision's layout and state_dict names: `conv1`, `bn1`, `layer1`..`layer4` of
BasicBlock (18) or Bottleneck (50; stride on the 3x3 conv, "ResNet v1.5") blocks
with `downsample.0/.1` shortcuts, `fc`; torchvision's initialisation (convs
kaiming-normal fan_out, BatchNorm weight 1 and bias 0). `width` scales every
channel count (1.0 is the published network; tests use small widths).
"""

import types

from jaxdl.models._frameworks import twin_builder, two_frameworks
from jaxdl.models._registry import register_model

# Block type and blocks per stage (layer1..layer4).
DEPTHS = {18: ("basic", (2, 2, 2, 2)), 50: ("bottleneck", (3, 4, 6, 3))}


def _define(nn, F, ops):  # noqa: N803 - `nn`/`F` as in model code
    def conv3x3(in_channels, out_channels, stride=1):
        return nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)

    def conv1x1(in_channels, out_channels, stride=1):
        return nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=False)

    class BasicBlock(nn.Module):
        expansion = 1

        def __init__(self, in_channels, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = conv3x3(in_channels, planes, stride)
            self.bn1 = nn.BatchNorm2d(planes)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = conv3x3(planes, planes)
            self.bn2 = nn.BatchNorm2d(planes)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            shortcut = x if self.downsample is None else self.downsample(x)
            return self.relu(out + shortcut)

    class Bottleneck(nn.Module):
        expansion = 4

        def __init__(self, in_channels, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = conv1x1(in_channels, planes)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = conv3x3(planes, planes, stride)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = conv1x1(planes, planes * self.expansion)
            self.bn3 = nn.BatchNorm2d(planes * self.expansion)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            shortcut = x if self.downsample is None else self.downsample(x)
            return self.relu(out + shortcut)

    blocks = {"basic": BasicBlock, "bottleneck": Bottleneck}

    class ResNet(nn.Module):
        """torchvision's ResNet(block, layers): `block` is "basic" or "bottleneck", `layers`
        the number of blocks in layer1..layer4."""

        def __init__(self, block, layers, num_classes=1000, width=1.0):
            super().__init__()
            block = blocks[block]
            planes = [max(1, round(c * width)) for c in (64, 128, 256, 512)]
            self.in_channels = planes[0]
            self.conv1 = nn.Conv2d(3, planes[0], 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(planes[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            for i, (p, n) in enumerate(zip(planes, layers)):
                setattr(self, f"layer{i + 1}", self._make_layer(block, p, n, 1 if i == 0 else 2))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(planes[3] * block.expansion, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    m.weight = nn.init.kaiming_normal_(m.weight, mode="fan_out",
                                                       nonlinearity="relu")

        def _make_layer(self, block, planes, count, stride):
            """`count` blocks; the first changes stride/channels, with a 1x1 conv shortcut."""
            downsample = None
            if stride != 1 or self.in_channels != planes * block.expansion:
                downsample = nn.Sequential(
                    conv1x1(self.in_channels, planes * block.expansion, stride),
                    nn.BatchNorm2d(planes * block.expansion))
            layers = [block(self.in_channels, planes, stride, downsample)]
            self.in_channels = planes * block.expansion
            layers += [block(self.in_channels, planes) for _ in range(1, count)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            x = self.avgpool(x)
            return self.fc(x.reshape(x.shape[0], -1))

    return types.SimpleNamespace(ResNet=ResNet)


JAXDL, TORCH = two_frameworks(_define)


def _resnet(depth):
    block, layers = DEPTHS[depth]

    @register_model(f"resnet{depth}", description=f"ResNet-{depth} (torchvision)",
                    torch_twin=twin_builder(TORCH, "ResNet", block=block, layers=layers))
    def build(num_classes=1000, width=1.0):
        return JAXDL.ResNet(block, layers, num_classes, width)

    build.__name__ = build.__qualname__ = f"resnet{depth}"
    return build


resnet18, resnet50 = _resnet(18), _resnet(50)
