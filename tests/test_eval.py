"""The evaluation form: which op becomes what, determinism, one image == its batch row, and
every input kind (array, tensor, PIL, encoded bytes) preprocessed alike."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from helpers import make_image, varied_images
from PIL import Image

import pixelpipe as pp
from pixelpipe.eval import CenterResizedCrop, eval_form, preprocess
from pixelpipe.ops import GeometryOp
from pixelpipe.tools.bench.pipelines import pipeline_ops

NORM = pp.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def rich(size: int = 24) -> pp.Compose:
    return pp.Compose([pp.RandomResizedCrop(size), pp.RandomFlip(), pp.RandomRotate(10),
                       pp.RandomAffine(degrees=5, shear=3), pp.RandomPerspective(0.2),
                       pp.ColorJitter(0.3, 0.3, 0.3, 0.05), pp.RandomGrayscale(0.2), NORM],
                      dtype=torch.float16, layout="NHWC")


def jpeg(img: np.ndarray, quality: int = 92) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def names(c: pp.Compose) -> list[str]:
    return [type(op).__name__ for op in c.ops]


# ----------------------------------------------------------------------------- the op mapping
class TestEvalForm:
    def test_random_ops_are_replaced_or_dropped(self):
        ev = eval_form(rich())
        assert names(ev) == ["CenterResizedCrop", "Normalize"]
        assert ev.ops[0].size == (24, 24) and ev.ops[0].ratio == (3 / 4, 4 / 3)

    def test_imagenet_style(self):
        ev = eval_form(rich(224), style="imagenet")
        assert names(ev) == ["Resize", "CenterCrop", "Normalize"]
        assert ev.ops[0].size == 256 and ev.ops[1].size == (224, 224)

    def test_imagenet_style_is_the_benchmarks_val_pipeline(self):
        imgs = varied_images(5)
        ev = eval_form(pp.Compose(pipeline_ops("rn50", 32)), style="imagenet")
        assert torch.equal(ev(imgs), pp.Compose(pipeline_ops("val", 32))(imgs))

    def test_deterministic_ops_are_kept(self):
        warp = pp.Warp(lambda sizes, draws: torch.eye(3, dtype=torch.float64).repeat(len(sizes), 1, 1))
        ops = [pp.Resize(40), pp.Crop(0.9), pp.CenterCrop(30), pp.Pad(2), warp,
               pp.Lambda(lambda x: x * 1.0), NORM]
        ev = eval_form(pp.Compose(ops))
        assert all(a is b for a, b in zip(ev.ops, ops)) and len(ev.ops) == len(ops)

    def test_probability_one_is_not_random_and_is_kept(self):
        ev = eval_form(pp.Compose([pp.Resize((8, 8)), pp.RandomFlip(horizontal=1.0, vertical=0.5),
                                   pp.RandomGrayscale(1.0), pp.RandomGrayscale(0.5)]))
        assert names(ev) == ["Resize", "RandomFlip", "RandomGrayscale"]
        assert (ev.ops[1].horizontal, ev.ops[1].vertical) == (1.0, 0.0)

    def test_output_settings_are_kept(self):
        c = pp.Compose([pp.RandomResizedCrop(8)], dtype=torch.bfloat16, layout="NHWC", channels=1,
                       antialias=False, mask_fill=255)
        ev = eval_form(c)
        assert ev.output == c.output

    def test_eval_form_of_an_eval_form_is_the_same(self):
        ev = eval_form(rich())
        assert names(eval_form(ev)) == names(ev)
        imgs = varied_images(3)
        assert torch.equal(eval_form(ev)(imgs), ev(imgs))

    def test_unknown_op_is_refused_naming_it(self):
        class Mine(GeometryOp):
            def transform(self, params, sizes):
                return torch.eye(3, dtype=torch.float64).repeat(len(sizes), 1, 1), sizes

        with pytest.raises(TypeError, match=r"ops\[1\] \(Mine\).*eval_form"):
            eval_form(pp.Compose([pp.Resize(8), Mine()]))

    def test_an_op_can_state_its_eval_form(self):
        class Mine(GeometryOp):
            def eval_form(self, style):
                return [pp.CenterCrop(6)] if style == "center" else []

        assert names(eval_form(pp.Compose([pp.Resize(8), Mine()]))) == ["Resize", "CenterCrop"]
        assert names(eval_form(pp.Compose([pp.Resize(8), Mine()]), style="imagenet")) == ["Resize"]

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="style"):
            eval_form(rich(), style="centre")
        with pytest.raises(TypeError, match="Compose"):
            eval_form([pp.Resize(8)])


class TestCenterResizedCrop:
    def test_is_random_resized_crops_fallback_window(self):
        # no square of the whole area fits a non-square image: RandomResizedCrop falls back
        # to the centred window with the ratio clamped, for every sample
        imgs = [make_image(30, 50, seed=1), make_image(47, 20, seed=2), make_image(33, 33, seed=3)]
        rrc = pp.Compose([pp.RandomResizedCrop(12, scale=(1.0, 1.0), ratio=(1.0, 1.0))])(imgs, seed=5)
        crc = pp.Compose([CenterResizedCrop(12, ratio=(1.0, 1.0))])(imgs)
        assert torch.equal(rrc, crc)

    def test_windows(self):
        op = CenterResizedCrop(10, ratio=(0.75, 4 / 3))
        sizes = np.array([[100.0, 100.0], [100.0, 300.0], [300.0, 100.0], [90.0, 100.0]])
        top, left, h, w = (t.tolist() for t in op.window(sizes))
        assert list(zip(top, left, h, w)) == [(0, 0, 100, 100), (0, 83, 100, 133), (83, 0, 133, 100),
                                              (0, 0, 90, 100)]

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="ratio"):
            CenterResizedCrop(8, ratio=(0.0, 1.0))
        with pytest.raises(ValueError, match="interpolation"):
            CenterResizedCrop(8, interpolation="cubic")


# ----------------------------------------------------------------------------- running it
class TestDeterminism:
    def test_same_output_for_any_seed_epoch_and_index(self):
        imgs = varied_images(6)
        ev = eval_form(rich())
        first = ev(imgs, seed=0, epoch=0)
        assert torch.equal(ev(imgs, seed=7, epoch=3), first)
        assert torch.equal(ev(imgs, seed=1, epoch=9, indices=torch.arange(100, 106)), first)

    def test_training_form_is_random_the_eval_form_is_not(self):
        imgs = varied_images(6)
        train = rich()
        assert not torch.equal(train(imgs, seed=0), train(imgs, seed=1))

    def test_one_image_equals_its_batch_row(self):
        imgs = varied_images(5)
        train = rich()
        batch = eval_form(train)(imgs)
        for i, img in enumerate(imgs):
            assert torch.equal(preprocess(train, img), batch[i])
            assert torch.equal(preprocess(train, img.numpy()), batch[i])


class TestInputs:
    def setup_method(self):
        self.train = pp.Compose([pp.RandomResizedCrop(24), pp.RandomFlip(), NORM])

    def test_pil_equals_array(self):
        img = make_image(40, 52, seed=4)
        assert torch.equal(preprocess(self.train, Image.fromarray(img)), preprocess(self.train, img))

    def test_pil_modes_convert_as_decoded_files_do(self):
        rgb = make_image(40, 52, seed=5)
        grey = make_image(40, 52, 0, seed=6)
        rgba = np.concatenate([rgb, np.full((40, 52, 1), 7, np.uint8)], 2)
        assert torch.equal(preprocess(self.train, Image.fromarray(grey)), preprocess(self.train, grey))
        assert torch.equal(preprocess(self.train, Image.fromarray(rgba, "RGBA")), preprocess(self.train, rgb))

    def test_pil_exif_orientation_is_applied(self):
        img = make_image(30, 50, seed=7)
        pil = Image.fromarray(img)
        exif = pil.getexif()
        exif[0x0112] = 6  # stored rotated: displayed 90 degrees clockwise
        buf = io.BytesIO()
        pil.save(buf, "PNG", exif=exif)
        shown = np.ascontiguousarray(np.rot90(img, -1))
        assert torch.equal(preprocess(self.train, Image.open(io.BytesIO(buf.getvalue()))),
                           preprocess(self.train, shown))

    def test_encoded_bytes_equal_their_decoded_pixels(self):
        # small enough that the decoder does not shrink while decoding (no DCT scaling)
        data = jpeg(make_image(40, 52, seed=8))
        pixels = np.array(Image.open(io.BytesIO(data)))
        assert torch.equal(preprocess(self.train, data), preprocess(self.train, pixels))
        assert torch.equal(preprocess(self.train, data), preprocess(self.train, Image.open(io.BytesIO(data))))

    def test_output_is_one_chw_image(self):
        out = preprocess(self.train, make_image(40, 52))
        assert out.shape == (3, 24, 24) and out.dtype == torch.float32

    def test_an_eval_form_is_used_as_it_is(self):
        img = make_image(40, 60, seed=9)
        imagenet = eval_form(self.train, style="imagenet")
        assert torch.equal(preprocess(imagenet, img), imagenet([img])[0])
        assert not torch.equal(preprocess(imagenet, img), preprocess(self.train, img))

    @pytest.mark.parametrize("bad, error, match", [
        (np.zeros((3, 20, 30), np.uint8), ValueError, "CHW"),
        (np.zeros((2, 20, 30, 3), np.uint8), ValueError, "one image"),
        ("photo.jpg", TypeError, "PIL image"),
        ([np.zeros((20, 30, 3), np.uint8)], TypeError, "PIL image"),
    ])
    def test_bad_inputs(self, bad, error, match):
        with pytest.raises(error, match=match):
            preprocess(self.train, bad)
