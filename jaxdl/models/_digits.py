"""Small classifiers for the 8x8 digits (input (N, 1, 8, 8)) and their PyTorch twins.

Each twin is written by hand with the same attribute names, so state_dict keys,
shapes and the forward computation match the jaxdl model one to one.
"""

from jaxdl import nn
from jaxdl._extras import require
from jaxdl.models._registry import register_model


def _torch_mlp(num_classes=10, hidden=128):
    torch = require("torch", "torch", "the PyTorch twin of mlp")

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(64, hidden)
            self.fc2 = torch.nn.Linear(hidden, num_classes)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x.reshape(x.shape[0], -1))))

    return MLP()


class DigitsMLP(nn.Module):
    """Flatten, Linear(64, hidden), ReLU, Linear(hidden, num_classes)."""

    def __init__(self, num_classes=10, hidden=128):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.fc1(x.reshape(x.shape[0], -1))))


def _torch_cnn(num_classes=10):
    torch = require("torch", "torch", "the PyTorch twin of cnn")

    class CNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
            self.pool = torch.nn.MaxPool2d(2)
            self.fc = torch.nn.Linear(32 * 2 * 2, num_classes)

        def forward(self, x):
            x = self.pool(torch.relu(self.conv1(x)))
            x = self.pool(torch.relu(self.conv2(x)))
            return self.fc(x.reshape(x.shape[0], -1))

    return CNN()


class DigitsCNN(nn.Module):
    """Two 3x3 conv + ReLU + 2x2 max-pool stages (16, 32 channels), then Linear(128, classes)."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(32 * 2 * 2, num_classes)

    def forward(self, x):
        x = self.pool(nn.functional.relu(self.conv1(x)))
        x = self.pool(nn.functional.relu(self.conv2(x)))
        return self.fc(x.reshape(x.shape[0], -1))


@register_model("mlp", torch_twin=_torch_mlp, description="2-layer MLP for 8x8 digits",
                datasets=("digits",))
def mlp(num_classes=10, hidden=128):
    return DigitsMLP(num_classes, hidden)


@register_model("cnn", torch_twin=_torch_cnn, description="2-conv CNN for 8x8 digits",
                datasets=("digits",))
def cnn(num_classes=10):
    return DigitsCNN(num_classes)
