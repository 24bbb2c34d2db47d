"""MobileNetV2 (Sandler et al. 2018) as torchvision builds it, and its PyTorch twin.

torchvision's layout and state_dict names: `features.0` is conv-BN-ReLU6
(`features.0.0/.1`), `features.1`..`features.17` are inverted residual blocks
(`features.N.conv.*`: optional 1x1 expansion, 3x3 depthwise, 1x1 linear
projection and its BatchNorm), `features.18` the last 1x1 conv-BN-ReLU6,
`classifier.1` the Linear after dropout; torchvision's initialisation.
`width_mult` scales channels as torchvision does (multiples of 8).
"""

import types

from jaxdl.models._frameworks import twin_builder, two_frameworks
from jaxdl.models._registry import register_model

# (expansion t, output channels c, blocks n, first stride s) per stage, from the paper's Table 2.
INVERTED_RESIDUAL_SETTING = [
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
    (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1),
]


def make_divisible(value, divisor=8):
    """torchvision's channel rounding: nearest multiple of `divisor`, never more than 10% down."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _define(nn, F, ops):  # noqa: N803 - `nn`/`F` as in model code
    def conv_bn_relu6(in_channels, out_channels, kernel_size=3, stride=1, groups=1):
        """torchvision's Conv2dNormActivation: Sequential(conv, BatchNorm, ReLU6), 'same' padding."""
        return nn.Sequential(
            nn.Conv2d(in_channels, out_channels, kernel_size, stride, (kernel_size - 1) // 2,
                      groups=groups, bias=False),
            nn.BatchNorm2d(out_channels), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, in_channels, out_channels, stride, expand_ratio):
            super().__init__()
            hidden = int(round(in_channels * expand_ratio))
            self.use_res_connect = stride == 1 and in_channels == out_channels
            layers = [conv_bn_relu6(in_channels, hidden, 1)] if expand_ratio != 1 else []
            layers += [conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
                       nn.Conv2d(hidden, out_channels, 1, bias=False),  # linear bottleneck
                       nn.BatchNorm2d(out_channels)]
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            return x + self.conv(x) if self.use_res_connect else self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, num_classes=1000, width_mult=1.0, dropout=0.2):
            super().__init__()
            channels = make_divisible(32 * width_mult)
            last_channels = make_divisible(1280 * max(1.0, width_mult))
            features = [conv_bn_relu6(3, channels, stride=2)]
            for t, c, n, s in INVERTED_RESIDUAL_SETTING:
                out_channels = make_divisible(c * width_mult)
                for i in range(n):
                    features.append(InvertedResidual(channels, out_channels, s if i == 0 else 1, t))
                    channels = out_channels
            features.append(conv_bn_relu6(channels, last_channels, 1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last_channels, num_classes))
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    m.weight = nn.init.kaiming_normal_(m.weight, mode="fan_out")
                elif isinstance(m, nn.Linear):
                    m.weight = nn.init.normal_(m.weight, 0.0, 0.01)
                    m.bias = nn.init.zeros_(m.bias)

        def forward(self, x):
            x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
            return self.classifier(x.reshape(x.shape[0], -1))

    return types.SimpleNamespace(MobileNetV2=MobileNetV2)


JAXDL, TORCH = two_frameworks(_define)


@register_model("mobilenet_v2", torch_twin=twin_builder(TORCH, "MobileNetV2"),
                description="MobileNetV2 (torchvision)")
def mobilenet_v2(num_classes=1000, width_mult=1.0, dropout=0.2):
    return JAXDL.MobileNetV2(num_classes, width_mult, dropout)
