#!/usr/bin/python3
"""The language model (gpt:L,D,H,T) in PyTorch against tessera: run by test_gpt_torch.sh.

- Equal to PyTorch: tests/gpt_steps.c (GPT_STEPS) builds gpt:2,32,4,16 (AdamW lr 3e-3, weight
  decay 0.3) from a start that uses its attention (PyTorch's 200 steps from GPT-2's
  initialization on the text's second half, --from; at GPT-2's initialization the scores are
  near zero and the attention nearly uniform, so a wrong scale of the scores hardly shows),
  writes its checkpoint, trains 10 steps on fixed batches of Debian's Apache-2.0 licence text
  (bytes as tokens) and evaluates one more batch;
  PyTorch loads the checkpoint into tessera.gpt.GPT (to_torch), takes the same AdamW steps
  (to_torch_optimizer: decay on the embedding tables and conv weights only, as tessera) on the
  same tokens: the loss of the first step, of every step to the 10th, and the evaluation after
  the 10th agree within 1e-4 relative; tessera's final checkpoint loads into PyTorch and gives
  PyTorch's final evaluation loss within the same tolerance; and the same with the gradients'
  norm clipped to 0.5 (--clip-grad, clip_grad_norm_), below it at every step, from tessera's
  own GPT-2 initialization. From the trained start, the same steps in PyTorch with the scores
  scaled by the model width instead of the head width end more than 30 times the tolerance
  away: the comparison would see that mistake in tessera.
- Without the binary (always): the GPT module from a checkpoint equals the NumPy reference
  (tessera's layouts; attention as softmax(q k^T / sqrt(dh) + mask) v in float64) on sequences
  of several lengths, its GELU and layer norm the reference's formulas, checkpoints round-trip bitwise, the shorthand gives add_gpt's layers and
  description, the decay groups are tessera's, and what is not a GPT is refused naming the layer.

Environment: GPT_STEPS (the driver; the comparison with tessera is skipped without it).
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import tessera  # noqa: E402
from tessera import model as tmodel  # noqa: E402
from tessera import reference  # noqa: E402
from tessera.gpt import GPT, CausalSelfAttention, gpt_config  # noqa: E402

GPT_STEPS = os.environ.get("GPT_STEPS")
TEXT = "/usr/share/common-licenses/Apache-2.0"  # a text that does not change with the repository
MODEL, BATCH, STEPS, LR, WD = "gpt:2,32,4,16", 8, 10, 3e-3, 0.3
RTOL = 1e-4
TMP = None


def setUpModule():
    global TMP
    TMP = tempfile.mkdtemp(prefix="tessera-gpt-")
    torch.set_num_threads(1)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def windows(path, t):
    """gpt_steps.c's samples, --text's windows (no test set): (x, y) of the text's consecutive
    windows of t bytes as int64, y the next byte at each position."""
    train, test = tessera.data.load_text(path, t, test_fraction=0)
    assert len(test) == 0
    return train.x.astype(np.int64), train.y


def fresh_checkpoint(name, spec=MODEL, seed=0):
    torch.manual_seed(seed)
    net = GPT.from_spec(spec, 256, init="gpt2")
    with torch.no_grad():  # layer norms and biases away from 1 and 0, so a mix-up shows
        for _, p, _, decay in net.param_list():
            if not decay:
                p.add_(0.1 * torch.randn_like(p))
    return tessera.from_torch(net, os.path.join(TMP, name), optimizer="adamw")


def pretrained_checkpoint(name, seed=5, steps=200, lr=1e-2):
    """A start that uses its attention: MODEL from GPT-2's initialization after `steps` PyTorch
    AdamW steps (batch 16, no decay) on random windows of the text's second half (never the
    batches the comparison takes), written with fresh AdamW state. From GPT-2's initialization
    a wrong scale of the scores moved the 10 steps' losses by 1.5e-4 (relative), from this
    start by 8e-3, 5e-3 at the first step."""
    torch.manual_seed(seed)
    net = GPT.from_spec(MODEL, 256, init="gpt2").train()
    x, y = windows(TEXT, int(MODEL.split(",")[-1]))  # T, the context
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        rows = torch.randint(len(x) // 2, len(x), (16,), generator=g)
        opt.zero_grad()
        net.loss(x[rows], y[rows]).backward()
        opt.step()
    return tessera.from_torch(net, os.path.join(TMP, name), optimizer="adamw")


def width_scaled_forward(self, x):
    """CausalSelfAttention.forward with the scores scaled by 1 / sqrt(model width), the mistake
    the comparison must see."""
    n, t, d = x.shape
    q, k, v = self.c_attn(x).split(d, dim=2)
    dh = d // self.heads
    q, k, v = (a.view(n, t, self.heads, dh).transpose(1, 2) for a in (q, k, v))
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(n, t, d)
    return self.c_proj(y)


def torch_steps(init, x, y, clip=0.0):
    """PyTorch from checkpoint init, STEPS AdamW steps on gpt_steps.c's batches: the losses, the
    gradients' norms (with clip), the net and the evaluation after the last step."""
    net = tessera.to_torch(init).train()
    opt = tessera.to_torch_optimizer(init, net)
    losses, norms = [], []
    for k in range(STEPS):
        rows = slice(k * BATCH, (k + 1) * BATCH)
        opt.zero_grad()
        loss = net.loss(x[rows], y[rows])
        loss.backward()
        if clip:
            norms.append(float(torch.nn.utils.clip_grad_norm_(net.parameters(), clip)))
        opt.step()
        losses.append(loss.item())
    net.eval()
    rows = slice(STEPS * BATCH, (STEPS + 1) * BATCH)
    with torch.no_grad():
        evaluation = net.loss(x[rows], y[rows]).item()
    return losses, norms, net, evaluation


class Reference(unittest.TestCase):
    """The PyTorch module against the NumPy reference, in tessera's layouts."""

    def test_shorthand_is_add_gpt(self):
        layers = tmodel.shorthand("gpt:2,32,4,16", 256)
        g = tmodel.Graph(layers, (1, 16, 1))
        self.assertEqual([l.name for l in g.layers[:12]],
                         ["embed", "h0.ln1", "h0.qkv", "h0.attn", "h0.proj", "h0.res1", "h0.ln2",
                          "h0.fc", "h0.gelu", "h0.fc2", "h0.res2", "h1.ln1"])
        self.assertEqual(g.layers[-2].name, "lnf")
        self.assertEqual(g.layers[-1].kind, "lmhead")
        self.assertEqual(g.layers[5].inputs, ["embed", "h0.proj"])
        self.assertEqual(g.output.shape, (256, 16, 1))
        self.assertTrue(g.describe().startswith(
            "16-embedding/v256/t16-layernorm-conv1x1/96-attention/h4-conv1x1/32-"
            "add[embed,h0.proj]-layernorm-conv1x1/128-gelu-conv1x1/32-add[h0.res1,h0.fc2]-"))
        again = tmodel.Graph(tmodel.read_ini(g.to_ini()), (1, 16, 1))
        self.assertEqual(again.describe(), g.describe())
        self.assertEqual(gpt_config(again)[0], {"layers": 2, "width": 32, "heads": 4,
                                                "context": 16, "vocab": 256, "positions": 16})
        with self.assertRaisesRegex(tmodel.ModelError, "width 30 is not divisible by the 4"):
            tmodel.shorthand("gpt:2,30,4,16", 256)
        with self.assertRaisesRegex(tmodel.ModelError, "expected four positive integers"):
            tmodel.shorthand("gpt:2,32,4", 256)

    def test_torch_equals_the_reference(self):
        ckpt = fresh_checkpoint("ref.st")
        net = tessera.to_torch(ckpt)
        rng = np.random.RandomState(1)
        for t in (16, 13, 1):  # the context, and shorter sequences
            x = rng.randint(0, 256, (3, t)).astype(np.float32)
            g = tmodel.Graph(ckpt.graph.layers, (1, t, 1))
            short = tessera.Checkpoint(ckpt.tensors, dict(ckpt.metadata,
                                                          input_shape="1 %d 1" % t))
            self.assertEqual(short.graph.input_shape, g.input_shape)
            want = reference.forward(short, x)
            with torch.no_grad():
                got = net(torch.from_numpy(x)).numpy()
            self.assertEqual(got.shape, (3, t, 256))
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5, err_msg="T = %d" % t)

    def test_evaluate_averages_over_the_tokens(self):
        ckpt = fresh_checkpoint("eval.st")
        _, test = tessera.data.load_text(TEXT, 16)
        acc, loss, pred = reference.evaluate(ckpt, test)
        self.assertEqual(pred.shape, test.y.shape)
        net = tessera.to_torch(ckpt)
        with torch.no_grad():
            x = tessera.torch_inputs(test.x, ckpt)
            want = net.loss(x, torch.from_numpy(test.y)).item()
            right = (net(x).argmax(2).numpy() == test.y).mean()
        self.assertAlmostEqual(loss, want, delta=1e-5 * want)
        self.assertAlmostEqual(acc, right, delta=1.5 / test.y.size)

    def test_attention_is_softmax_of_masked_scores(self):
        torch.manual_seed(2)
        qkv = torch.randn(2, 7, 3 * 8, dtype=torch.float64)
        attn = tessera.gpt.CausalSelfAttention(8, 2).double()
        with torch.no_grad():  # the projections as identities: the attention alone
            attn.c_attn.weight.copy_(torch.eye(8, dtype=torch.float64).repeat(3, 1))
            attn.c_attn.bias.zero_()
            attn.c_proj.weight.copy_(torch.eye(8, dtype=torch.float64))
            attn.c_proj.bias.zero_()
        x = qkv[:, :, :8]
        want = reference.attention(torch.cat([x, x, x], dim=2).numpy(), 2)
        np.testing.assert_allclose(attn(x).detach().numpy(), want, rtol=1e-12, atol=1e-12)
        # position 0 sees itself only: its output is its own v
        np.testing.assert_allclose(want[:, 0], x[:, 0].numpy(), rtol=1e-12)

    def test_gelu_and_layernorm_are_the_reference_s(self):
        net = tessera.to_torch(fresh_checkpoint("gl.st"))
        x = torch.linspace(-6, 6, 1201, dtype=torch.float64)
        np.testing.assert_allclose(net.h[0].mlp.gelu(x).numpy(), reference.gelu(x.numpy()),
                                   rtol=1e-12, atol=1e-15)
        torch.manual_seed(7)
        x = 3 * torch.randn(5, 32) + 1
        ln = net.h[1].ln_2
        want = reference.layernorm(x.numpy(), ln.weight.detach().numpy(),
                                   ln.bias.detach().numpy(), 1e-5)
        np.testing.assert_allclose(ln(x).detach().numpy(), want, rtol=1e-5, atol=1e-6)

    def test_round_trip_keeps_every_tensor_bitwise(self):
        ckpt = fresh_checkpoint("rt.st")
        net = tessera.to_torch(ckpt)
        opt = tessera.to_torch_optimizer(ckpt, net)
        x, y = windows(TEXT, 16)
        opt.zero_grad()
        net.train().loss(torch.from_numpy(x[:4]), torch.from_numpy(y[:4])).backward()
        opt.step()
        back = tessera.from_torch(net, os.path.join(TMP, "rt2.st"), like=ckpt, optimizer=opt)
        self.assertEqual(back.optimizer_steps, 1)
        again = tessera.to_torch(back)
        back2 = tessera.from_torch(again, os.path.join(TMP, "rt3.st"), like=back,
                                   optimizer=tessera.to_torch_optimizer(back, again))
        self.assertEqual(list(back.tensors), list(back2.tensors))
        for k, v in back.tensors.items():
            np.testing.assert_array_equal(back2.tensors[k], v, err_msg=k)
        self.assertEqual(back2.metadata["model"], ckpt.metadata["model"])

    def test_weight_decay_groups_are_tessera_s(self):
        ckpt = fresh_checkpoint("wd.st")
        net = tessera.to_torch(ckpt)
        decayed = {name for _, _, name, d in net.param_list() if d}
        self.assertIn("layers.0.embedding.weight", decayed)
        self.assertIn("layers.0.embedding.position", decayed)
        self.assertIn("layers.2.conv.weight", decayed)
        self.assertNotIn("layers.2.conv.bias", decayed)
        self.assertNotIn("layers.1.layernorm.weight", decayed)
        self.assertEqual(len(decayed), 2 + 4 * 2)  # wte, wpe, 4 convs per block
        groups = net.param_groups(0.1)
        swapped = [{"params": groups[0]["params"], "weight_decay": 0.0},
                   {"params": groups[1]["params"], "weight_decay": 0.1}]
        with self.assertRaisesRegex(ValueError, "embedding.weight is in a group of weight_decay "
                                                "0, but tessera decays it"):
            tessera.from_torch(net, os.path.join(TMP, "wd2.st"),
                               optimizer=torch.optim.AdamW(swapped))
        self.assertEqual(len(tessera.to_torch_optimizer(ckpt, net).param_groups), 2)

    def test_what_is_not_a_gpt_is_refused_naming_the_layer(self):
        layers = tmodel.shorthand("gpt:1,32,4,16", 256)
        layers[8].kind = "relu"  # h0.gelu
        with self.assertRaisesRegex(tmodel.ModelError, r"\[h0.gelu\] is relu where block 0's"):
            GPT(tmodel.Graph(layers, (1, 16, 1)))
        with self.assertRaisesRegex(tmodel.ModelError, "context = 16, but the sequence has 20"):
            tmodel.Graph(tmodel.shorthand("gpt:1,32,4,16", 256), (1, 20, 1))
        ini = "[e]\ntype = embedding\nvocab = 10\nunits = 8\n[h]\ntype = lmhead\nunits = 11\n"
        with self.assertRaisesRegex(tmodel.ModelError, "units = 11, but the embedding"):
            tmodel.Graph(tmodel.read_ini(ini), (1, 4, 1))


@unittest.skipUnless(GPT_STEPS, "GPT_STEPS (tests/gpt_steps.c) not given")
class AgainstTessera(unittest.TestCase):
    """The same steps in tessera and in PyTorch."""

    CLIP = 0.0  # --clip-grad: 0 none
    PRETRAINED = True  # from pretrained_checkpoint (else from gpt_steps's GPT-2 initialization)

    @classmethod
    def setUpClass(cls):
        cls.out = os.path.join(TMP, "tessera-clip" if cls.CLIP else "tessera")
        os.makedirs(cls.out)
        args = [GPT_STEPS, "--model", MODEL, "--text", TEXT, "--out", cls.out,
                "--batch", str(BATCH), "--steps", str(STEPS), "--lr", str(LR),
                "--weight-decay", str(WD), "--clip-grad", str(cls.CLIP)]
        if cls.PRETRAINED:
            args += ["--from", pretrained_checkpoint("start.st").path]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode:
            raise AssertionError("gpt_steps: exit %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
        lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        cls.tessera_losses = [o["loss"] for o in lines if "loss" in o]
        cls.tessera_eval = next(o["eval"] for o in lines if "eval" in o)
        cls.init = tessera.read_checkpoint(os.path.join(cls.out, "init.st"))
        cls.final = tessera.read_checkpoint(os.path.join(cls.out, "final.st"))
        x, y = windows(TEXT, cls.init.graph.input_shape[1])
        cls.x, cls.y = torch.from_numpy(x), torch.from_numpy(y)
        # PyTorch from tessera's initial checkpoint, the same batches and steps.
        cls.torch_losses, cls.norms, cls.net, cls.torch_eval = torch_steps(
            cls.init, cls.x, cls.y, cls.CLIP)
        cls.eval_rows = slice(STEPS * BATCH, (STEPS + 1) * BATCH)
        with torch.no_grad():  # the evaluation batch before the steps
            cls.eval_before = tessera.to_torch(cls.init).eval().loss(
                cls.x[cls.eval_rows], cls.y[cls.eval_rows]).item()
        print("\nclip %g\ntessera losses %s eval %.7g\nPyTorch losses %s eval %.7g" % (
            cls.CLIP, " ".join("%.7g" % v for v in cls.tessera_losses), cls.tessera_eval,
            " ".join("%.7g" % v for v in cls.torch_losses), cls.torch_eval), file=sys.stderr)

    def test_the_checkpoint_is_the_gpt_asked_for(self):
        self.assertEqual(self.init.optimizer, "adamw")
        self.assertEqual(self.init.optimizer_hyper["weight_decay"], WD)  # as written
        self.assertEqual(self.init.metadata["init"], "gpt2")
        self.assertEqual(self.final.optimizer_steps, STEPS)
        # the Python shorthand describes the model as tessera does
        g = tmodel.Graph(tmodel.shorthand(MODEL, 256), self.init.input_shape)
        self.assertEqual(self.init.metadata["model"], g.describe())
        self.assertEqual(self.init.metadata["model_ini"], g.to_ini())
        if not self.PRETRAINED:  # tessera's own initialization
            std = self.init.tensors["layers.0.embedding.weight"].std()
            self.assertAlmostEqual(float(std), 0.02, delta=0.002)  # GPT-2's normal(0, 0.02)

    def test_a_wrong_attention_scale_would_show(self):
        """The same steps with the scores scaled by the model width (1 / sqrt(32)) instead of the
        head width (1 / sqrt(8)) end far outside the tolerance: tessera making that mistake
        fails test_ten_adamw_steps_agree."""
        if not self.PRETRAINED:
            self.skipTest("from GPT-2's initialization the scores are near zero")
        right = CausalSelfAttention.forward
        CausalSelfAttention.forward = width_scaled_forward
        try:
            losses, _, _, evaluation = torch_steps(self.init, self.x, self.y, self.CLIP)
        finally:
            CausalSelfAttention.forward = right
        right_all = np.array(self.torch_losses + [self.torch_eval])
        off = np.max(np.abs(np.array(losses + [evaluation]) - right_all) / right_all)
        print("\nclip %g: a width-scaled attention ends %.2e (relative) from the right one"
              % (self.CLIP, off), file=sys.stderr)
        self.assertGreater(off, 30 * RTOL)

    def test_the_first_step_s_loss_agrees(self):
        self.assertEqual(len(self.tessera_losses), STEPS)
        np.testing.assert_allclose(self.tessera_losses[0], self.torch_losses[0], rtol=RTOL)

    def test_ten_adamw_steps_agree(self):
        np.testing.assert_allclose(self.tessera_losses, self.torch_losses, rtol=RTOL)
        np.testing.assert_allclose(self.tessera_eval, self.torch_eval, rtol=RTOL)
        self.assertLess(self.torch_eval, self.eval_before, "the evaluation batch's loss falls")

    def test_tessera_s_final_weights_give_torch_s_final_loss(self):
        net = tessera.to_torch(self.final)
        with torch.no_grad():
            loss = net.loss(self.x[self.eval_rows], self.y[self.eval_rows]).item()
        np.testing.assert_allclose(loss, self.torch_eval, rtol=RTOL)
        np.testing.assert_allclose(loss, self.tessera_eval, rtol=RTOL)


class AgainstTesseraClipped(AgainstTessera):
    """The same steps with --clip-grad 0.5 and PyTorch's clip_grad_norm_(0.5): a bound below
    the gradients' norm at every step, so that every step is clipped."""

    CLIP = 0.5
    PRETRAINED = False  # Adam barely feels a clip of the trained start's smaller gradients

    def test_every_step_was_clipped(self):
        self.assertEqual(len(self.norms), STEPS)
        self.assertGreater(min(self.norms), 2 * self.CLIP, "the norms %s" % self.norms)

    def test_clipping_changed_the_steps(self):
        plain, _, _, _ = torch_steps(self.init, self.x, self.y)  # the same start, unclipped
        self.assertGreater(abs(plain[-1] - self.tessera_losses[-1]), 10 * RTOL * plain[-1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
