#!/usr/bin/env python3
"""Writes models/resnet18.json: ResNet-18, CIFAR variant (3x3 stem, no stem pooling), or with
--imagenet models/resnet18-imagenet.json: ResNet-18 as torchvision builds it for ImageNet (7x7
stride-2 stem and 3x3 stride-2 max pooling, so 224x224 images reach the blocks at 56x56).

The spec format has no loops, so the 18-layer network is generated here once and committed.
Run: python3 scripts/gen_resnet18_spec.py > models/resnet18.json
     python3 scripts/gen_resnet18_spec.py --imagenet > models/resnet18-imagenet.json
"""
import json
import sys

imagenet = "--imagenet" in sys.argv[1:]

layers = []

def conv(name, out, k, stride, pad, inp=None):
    l = {"type": "conv2d", "name": name, "out_channels": out, "kernel": k,
         "stride": stride, "padding": pad, "bias": False}
    if inp:
        l["input"] = inp
    layers.append(l)

def bn(name):
    layers.append({"type": "batchnorm2d", "name": name})

def relu(name):
    layers.append({"type": "relu", "name": name})

conv("conv1", 64, *((7, 2, 3) if imagenet else (3, 1, 1)))  # kernel, stride, padding
bn("bn1")
relu("relu1")
prev, channels = "relu1", 64
if imagenet:
    layers.append({"type": "maxpool2d", "name": "pool1", "kernel": 3, "stride": 2, "padding": 1})
    prev = "pool1"
for stage, width in enumerate([64, 128, 256, 512], start=1):
    for block in (1, 2):
        p = f"layer{stage}.{block}"
        stride = 2 if (stage > 1 and block == 1) else 1
        conv(f"{p}.conv1", width, 3, stride, 1)
        bn(f"{p}.bn1")
        relu(f"{p}.relu1")
        conv(f"{p}.conv2", width, 3, 1, 1)
        bn(f"{p}.bn2")
        main, shortcut = f"{p}.bn2", prev
        if stride != 1 or channels != width:
            conv(f"{p}.shortcut.conv", width, 1, stride, 0, inp=prev)
            bn(f"{p}.shortcut.bn")
            shortcut = f"{p}.shortcut.bn"
        layers.append({"type": "add", "name": f"{p}.add", "input": main, "from": shortcut})
        relu(f"{p}.relu2")
        prev, channels = f"{p}.relu2", width
layers.append({"type": "global_avgpool", "name": "avgpool"})
layers.append({"type": "flatten", "name": "flatten"})
layers.append({"type": "linear", "name": "fc", "out_features": "classes"})

if imagenet:
    spec = {"name": "resnet18-imagenet",
            "description": "ResNet-18 for ImageNet-sized images (7x7 stride-2 stem, 3x3 max pooling), as torchvision's; "
                           "11.7M parameters with 1000 classes",
            "input": [3, 224, 224], "classes": 1000,  # what 'models show' and 'plan' take unless told otherwise
            "train_images": 1281167,  # ImageNet-1k's training set: what 'plan' counts an epoch in
            "layers": layers}
else:
    spec = {"name": "resnet18",
            "description": "ResNet-18, CIFAR variant (3x3 stem, no stem pooling); about 11.2M parameters",
            "layers": layers}
print(json.dumps(spec, indent=1))
