#!/usr/bin/env python3
"""zoo.py [--check] [--counts]: writes the model zoo's INI files in models/ (resnet20, resnet32,
resnet56, resnet18, resnet50, vgg11, vgg16, alexnet, googlenet) from the architectures below, so
that the long files can be regenerated; --check says whether the files in models/ are what it
would write (exit 1 when not), --counts prints each model's parameters as tessera builds it
(its convolutions carry a bias) and without the convolutions' biases (the published counts of
torchvision's ResNets and GoogLeNet, whose convolutions have none), at 224x224x3 or 32x32x3.

The .ini files are what is installed; this script is how they were made. Every file's output
layer says `units = classes`: the number of classes comes from the data (or --classes), and the
dense layers after a flatten take their fan-in from the shape, so that a model runs at any
input size where its windows fit (docs/training.md, "The model zoo")."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")


class Model:
    """Sections in order, each (name, type, keys, inputs), and a shape walk for the counts."""

    def __init__(self, title):
        self.title, self.sections, self.last = title, [], "input"

    def add(self, name, kind, inputs=None, **keys):
        names = inputs if inputs is not None else [self.last]
        self.sections.append((name, kind, keys, names))
        self.last = name
        return name

    def conv(self, name, filters, kernel, stride=1, padding=0, inputs=None, relu=False):
        keys = {"filters": filters, "kernel": kernel}
        if stride != 1:
            keys["stride"] = stride
        if padding:
            keys["padding"] = padding
        if relu:
            keys["activation"] = "relu"
        return self.add(name, "conv", inputs, **keys)

    def bn(self, name, relu=False, inputs=None, eps=None):
        keys = {"activation": "relu"} if relu else {}
        if eps:
            keys["eps"] = eps
        return self.add(name, "batchnorm", inputs, **keys)

    def conv_bn(self, name, filters, kernel, stride=1, padding=0, relu=True, inputs=None, eps=None):
        self.conv(name, filters, kernel, stride, padding, inputs)
        return self.bn(name + "_bn", relu, eps=eps)

    def text(self):
        out = ["; " + line for line in self.title.splitlines()]
        out.append("; Written by scripts/zoo.py: edit that script and run it again.")
        prev = "input"
        for name, kind, keys, inputs in self.sections:
            out.append("[%s]" % name)
            out.append("type = %s" % kind)
            if inputs != [prev]:
                out.append(("input = %s" if len(inputs) == 1 else "inputs = %s") % ", ".join(inputs))
            for k, v in keys.items():
                out.append("%s = %s" % (k, v))
            prev = name
        return "\n".join(out) + "\n"

    def count(self, shape, classes):
        """(parameters with conv biases, conv biases) for an input (h, w, c)."""
        shapes, params, biases = {"input": shape}, 0, 0
        for name, kind, keys, inputs in self.sections:
            h, w, c = shapes[inputs[0]]
            if kind == "conv":
                k, s, p, f = keys["kernel"], keys.get("stride", 1), keys.get("padding", 0), keys["filters"]
                params += k * k * c * f + f
                biases += f
                shapes[name] = ((h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, f)
            elif kind in ("maxpool", "avgpool"):
                k, p = keys["kernel"], keys.get("padding", 0)
                s = keys.get("stride", k)
                shapes[name] = ((h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1, c)
            elif kind == "batchnorm":
                params += 2 * c
                shapes[name] = (h, w, c)
            elif kind == "globalavgpool":
                shapes[name] = (1, 1, c)
            elif kind == "flatten":
                shapes[name] = (1, 1, h * w * c)
            elif kind == "dense":
                u = classes if keys["units"] == "classes" else keys["units"]
                params += h * w * c * u + u
                shapes[name] = (1, 1, u)
            elif kind == "concat":
                shapes[name] = (h, w, sum(shapes[i][2] for i in inputs))
            else:  # add, dropout, relu
                shapes[name] = (h, w, c)
        return params, biases


def cifar_resnet(n):
    """He et al.'s CIFAR ResNet-(6n+2): 3 stages of n basic blocks at 16, 32, 64 channels, option
    B shortcuts (a strided 1x1 convolution and a batchnorm where the shape changes)."""
    depth = 6 * n + 2
    m = Model("ResNet-%d for 32x32 images (He et al. 2016, section 4.2): a 3x3 convolution of 16,\n"
              "then 3 stages of %d basic blocks (two 3x3 convolutions each, with batchnorm) at 16,\n"
              "32 and 64 channels, the first block of stages 2 and 3 striding 2 with a 1x1 strided\n"
              "convolution and batchnorm as its shortcut (option B), global average pooling and\n"
              "the classifier. --input 32x32x3 for CIFAR-10." % (depth, n))
    x = m.conv_bn("conv1", 16, 3, padding=1)
    for stage, width in enumerate((16, 32, 64), 1):
        for b in range(1, n + 1):
            stride = 2 if stage > 1 and b == 1 else 1
            p = "s%db%d" % (stage, b)
            m.conv_bn(p + "_conv1", width, 3, stride, 1, inputs=[x])
            y = m.conv_bn(p + "_conv2", width, 3, 1, 1, relu=False)
            short = x
            if stride != 1:
                short = m.conv_bn(p + "_short", width, 1, stride, relu=False, inputs=[x])
            x = m.add(p, "add", [y, short], activation="relu")
    m.add("pool", "globalavgpool")
    m.add("fc", "dense", units="classes")
    return m


def imagenet_resnet(blocks, bottleneck, depth):
    """torchvision's resnet18 / resnet50 (v1.5: a bottleneck strides in its 3x3 convolution)."""
    kind = "bottleneck blocks (1x1, 3x3, 1x1 convolutions, 4x wider out)" if bottleneck else \
        "basic blocks (two 3x3 convolutions)"
    m = Model("ResNet-%d as torchvision's resnet%d, for 224x224x3 ImageNet images: a 7x7/2\n"
              "convolution of 64, batchnorm, a 3x3/2 max pooling, 4 stages of %s\n"
              "(%s blocks) at 64, 128, 256 and 512 channels, the shortcuts a 1x1 strided\n"
              "convolution with batchnorm where the shape changes, global average pooling and the\n"
              "classifier. tessera's convolutions carry a bias, torchvision's here do not\n"
              "(docs/training.md, \"The model zoo\")." % (depth, depth, kind, ", ".join(map(str, blocks))))
    m.conv_bn("conv1", 64, 7, 2, 3)
    x = m.add("pool1", "maxpool", kernel=3, stride=2, padding=1)
    inplanes = 64
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512)), 1):
        out = width * 4 if bottleneck else width
        for b in range(1, n + 1):
            stride = 2 if stage > 1 and b == 1 else 1
            p = "s%db%d" % (stage, b)
            if bottleneck:
                m.conv_bn(p + "_conv1", width, 1, inputs=[x])
                m.conv_bn(p + "_conv2", width, 3, stride, 1)
                y = m.conv_bn(p + "_conv3", out, 1, relu=False)
            else:
                m.conv_bn(p + "_conv1", width, 3, stride, 1, inputs=[x])
                y = m.conv_bn(p + "_conv2", width, 3, 1, 1, relu=False)
            short = x
            if stride != 1 or inplanes != out:
                short = m.conv_bn(p + "_short", out, 1, stride, relu=False, inputs=[x])
            x = m.add(p, "add", [y, short], activation="relu")
            inplanes = out
    m.add("pool", "globalavgpool")
    m.add("fc", "dense", units="classes")
    return m


def vgg(cfg, depth):
    """torchvision's vgg11_bn / vgg16_bn."""
    m = Model("VGG-%d with batchnorm as torchvision's vgg%d_bn, for 224x224x3 ImageNet images:\n"
              "3x3 convolutions (padding 1), each with batchnorm and ReLU, 2x2 max poolings, and the\n"
              "classifier of 4096, 4096 (ReLU, dropout 0.5) and one unit per class. The fan-in of\n"
              "fc1 comes from the shape: 7x7x512 at 224x224 (torchvision pools adaptively to 7x7\n"
              "first, which is the identity at 224x224)." % (depth, depth))
    conv = pool = 0
    for v in cfg:
        if v == "M":
            pool += 1
            m.add("pool%d" % pool, "maxpool", kernel=2)
        else:
            conv += 1
            m.conv_bn("conv%d" % conv, v, 3, 1, 1)
    m.add("flat", "flatten")
    m.add("fc1", "dense", units=4096, activation="relu")
    m.add("drop1", "dropout", rate=0.5)
    m.add("fc2", "dense", units=4096, activation="relu")
    m.add("drop2", "dropout", rate=0.5)
    m.add("fc3", "dense", units="classes")
    return m


def alexnet():
    m = Model("AlexNet as torchvision's alexnet (the one-GPU variant of Krizhevsky et al.), for\n"
              "224x224x3 images: five convolutions with ReLU (11x11/4 64, 5x5 192, 3x3 384, 256,\n"
              "256), three 3x3/2 max poolings, and the classifier of 4096, 4096 (dropout 0.5 before\n"
              "each) and one unit per class. fc1's fan-in comes from the shape: 6x6x256 at 224x224\n"
              "(torchvision pools adaptively to 6x6 first, the identity at 224x224).")
    m.conv("conv1", 64, 11, 4, 2, relu=True)
    m.add("pool1", "maxpool", kernel=3, stride=2)
    m.conv("conv2", 192, 5, 1, 2, relu=True)
    m.add("pool2", "maxpool", kernel=3, stride=2)
    m.conv("conv3", 384, 3, 1, 1, relu=True)
    m.conv("conv4", 256, 3, 1, 1, relu=True)
    m.conv("conv5", 256, 3, 1, 1, relu=True)
    m.add("pool3", "maxpool", kernel=3, stride=2)
    m.add("flat", "flatten")
    m.add("drop1", "dropout", rate=0.5)
    m.add("fc1", "dense", units=4096, activation="relu")
    m.add("drop2", "dropout", rate=0.5)
    m.add("fc2", "dense", units=4096, activation="relu")
    m.add("fc3", "dense", units="classes")
    return m


INCEPTION = [  # name, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5" (3x3 as torchvision), pool proj
    ("3a", 64, 96, 128, 16, 32, 32), ("3b", 128, 128, 192, 32, 96, 64), "pool",
    ("4a", 192, 96, 208, 16, 48, 64), ("4b", 160, 112, 224, 24, 64, 64),
    ("4c", 128, 128, 256, 24, 64, 64), ("4d", 112, 144, 288, 32, 64, 64),
    ("4e", 256, 160, 320, 32, 128, 128), "pool",
    ("5a", 256, 160, 320, 32, 128, 128), ("5b", 384, 192, 384, 48, 128, 128),
]


def googlenet():
    m = Model("GoogLeNet (Inception v1, Szegedy et al. 2015) as torchvision's googlenet without\n"
              "the auxiliary heads, for 224x224x3 images: every convolution with batchnorm (eps\n"
              "0.001) and ReLU, the '5x5' branch of each Inception block a 3x3 convolution (as\n"
              "torchvision's), the blocks' four branches joined by a concat, global average\n"
              "pooling, dropout 0.2 and the classifier. torchvision's max poolings round up\n"
              "(ceil_mode); here they pad by 1, the same shapes at 224x224.")
    eps = 0.001
    m.conv_bn("conv1", 64, 7, 2, 3, eps=eps)
    m.add("pool1", "maxpool", kernel=3, stride=2, padding=1)
    m.conv_bn("conv2", 64, 1, eps=eps)
    m.conv_bn("conv3", 192, 3, 1, 1, eps=eps)
    x = m.add("pool2", "maxpool", kernel=3, stride=2, padding=1)
    pools = 2
    for blk in INCEPTION:
        if blk == "pool":
            pools += 1
            x = m.add("pool%d" % pools, "maxpool", kernel=3, stride=2, padding=1)
            continue
        name, c1, r3, c3, r5, c5, pp = blk
        p = "i" + name
        b1 = m.conv_bn(p + "_1x1", c1, 1, inputs=[x], eps=eps)
        m.conv_bn(p + "_3x3r", r3, 1, inputs=[x], eps=eps)
        b2 = m.conv_bn(p + "_3x3", c3, 3, 1, 1, eps=eps)
        m.conv_bn(p + "_5x5r", r5, 1, inputs=[x], eps=eps)
        b3 = m.conv_bn(p + "_5x5", c5, 3, 1, 1, eps=eps)
        m.add(p + "_pool", "maxpool", [x], kernel=3, stride=1, padding=1)
        b4 = m.conv_bn(p + "_poolproj", pp, 1, eps=eps)
        x = m.add(p, "concat", [b1, b2, b3, b4])
    m.add("pool", "globalavgpool")
    m.add("drop", "dropout", rate=0.2)
    m.add("fc", "dense", units="classes")
    return m


def zoo():
    vgg11 = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]
    vgg16 = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
    return {
        "resnet20": (cifar_resnet(3), (32, 32, 3), 10),
        "resnet32": (cifar_resnet(5), (32, 32, 3), 10),
        "resnet56": (cifar_resnet(9), (32, 32, 3), 10),
        "resnet18": (imagenet_resnet([2, 2, 2, 2], False, 18), (224, 224, 3), 1000),
        "resnet50": (imagenet_resnet([3, 4, 6, 3], True, 50), (224, 224, 3), 1000),
        "vgg11": (vgg(vgg11, 11), (224, 224, 3), 1000),
        "vgg16": (vgg(vgg16, 16), (224, 224, 3), 1000),
        "alexnet": (alexnet(), (224, 224, 3), 1000),
        "googlenet": (googlenet(), (224, 224, 3), 1000),
    }


def main(argv):
    bad = 0
    for name, (model, shape, classes) in zoo().items():
        path = os.path.join(MODELS, name + ".ini")
        text = model.text()
        if "--counts" in argv:
            p, b = model.count(shape, classes)
            print("%-10s %dx%dx%d %5d classes: %11d parameters, %11d without conv biases" %
                  (name, shape[0], shape[1], shape[2], classes, p, p - b))
        elif "--check" in argv:
            if not os.path.exists(path) or open(path).read() != text:
                print("%s: not what scripts/zoo.py writes; run scripts/zoo.py" % path)
                bad = 1
        else:
            with open(path, "w") as f:
                f.write(text)
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
