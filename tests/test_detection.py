"""Detection targets: per-box labels, box formats in and out, SanitizeBoxes (min_area,
min_visibility, min_size) and the batch's "kept", the padded form, per-instance keypoints, and
torchvision's detection dicts (to_detection), from a Compose call and from a Pipeline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import pixelpipe as pp
from pixelpipe.data.errors import SampleError
from pixelpipe.data.targets import BOX_FORMATS, Targets, convert_boxes, to_detection

H, W = 60, 80
IMAGES = [np.zeros((H, W, 3), np.uint8)] * 3
# image 0: one box inside the 40x60 top-left crop, one entirely outside, one half in
BOXES = [np.array([[10, 10, 30, 30], [70, 50, 80, 60], [40, 20, 80, 30]], np.float64),
         np.zeros((0, 4)), np.array([[0, 0, 80, 60]], np.float64)]
LABELS = [[1, 2, 3], [], [5]]
CROP = pp.Crop((40, 60), anchor=(0, 0))


def test_labels_follow_their_boxes():
    out = pp.Compose([pp.RandomFlip(1.0)])(IMAGES, boxes=BOXES, labels=LABELS)
    assert [t.tolist() for t in out["labels"]] == LABELS and out["labels"][0].dtype == torch.int64
    assert out["boxes"][0][0].tolist() == [50.0, 10.0, 70.0, 30.0]


@pytest.mark.parametrize("kwargs, message", [
    ({"labels": LABELS}, "labels are the boxes' class ids"),
    ({"boxes": BOXES, "labels": [[1, 2], [], [5]]}, r"sample 0: labels: \(2,\) for 3 boxes"),
    ({"boxes": BOXES, "labels": [[1, 2, 3], [], 5]}, r"sample 2: labels: \(\) for 1 boxes"),
    ({"boxes": BOXES, "labels": [[1, 2, 3.5], [], [5]]}, "sample 0: labels: class ids must be integers"),
    ({"boxes": BOXES, "keypoints": [np.zeros((2, 4, 3)), None, np.zeros((1, 4, 3))]},
     "sample 0: keypoints: 2 instances for 3 boxes"),
    ({"keypoints": [np.zeros((2, 4, 3)), np.zeros((2, 3)), None]}, "sample 1: keypoints: "),
])
def test_bad_labels_and_instances_name_the_sample(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pp.Compose([CROP])(IMAGES, **kwargs)


@pytest.mark.parametrize("fmt", BOX_FORMATS)
def test_box_formats_in_and_out(fmt):
    """Boxes given in a format come back in it, moved as the same boxes in xyxy pixels are."""
    ops = [pp.RandomAffine(0, translate=(0.1, 0.1), scale=(0.8, 1.2)), pp.Resize((50, 70))]
    ref = pp.Compose(ops)(IMAGES, seed=2, boxes=BOXES)["boxes"]
    given = [convert_boxes(b, "xyxy", fmt, np.array([W, H])) for b in BOXES]
    out = pp.Compose(ops, box_format=fmt)(IMAGES, seed=2, boxes=given)["boxes"]
    for r, o in zip(ref, out):
        want = convert_boxes(r.numpy(), "xyxy", fmt, np.array([70, 50]))
        np.testing.assert_allclose(o.numpy(), want, atol=1e-4)
    assert pp.Compose(ops, box_format=fmt).like(ops).targets.box_format == fmt


def test_box_format_conversions():
    b = np.array([[20.0, 30.0, 100.0, 120.0]])
    assert convert_boxes(b, "xywh", "xyxy").tolist() == [[20, 30, 120, 150]]
    assert convert_boxes(b, "xyxy", "cxcywh").tolist() == [[60, 75, 80, 90]]
    assert convert_boxes([[0.5, 0.5, 0.25, 0.5]], "cxcywhn", "xyxy", np.array([640, 480])).tolist() == [[240, 120, 400, 360]]
    for f in BOX_FORMATS:
        np.testing.assert_allclose(convert_boxes(convert_boxes(b, "xyxy", f, [200, 300]), f, "xyxy", [200, 300]), b)
    with pytest.raises(ValueError, match="box_format"):
        pp.Compose([CROP], box_format="yolo")
    with pytest.raises(ValueError, match="targets"):
        pp.Compose([CROP], targets="ragged")
    with pytest.raises(ValueError, match=r"sample 0: boxes: .* negative width"):
        pp.Compose([CROP], box_format="xywh")(IMAGES[:1], boxes=[[[5, 5, -1, 3]]])


def test_sanitize_drops_boxes_with_their_labels_and_says_which():
    out = pp.Compose([CROP, pp.SanitizeBoxes()])(IMAGES, boxes=BOXES, labels=LABELS)
    assert [k.tolist() for k in out["kept"]] == [[0, 2], [], [0]]
    assert out["boxes"][0].tolist() == [[10, 10, 30, 30], [40, 20, 60, 30]]
    assert [t.tolist() for t in out["labels"]] == [[1, 3], [], [5]]
    # the third box of image 0 keeps half its area: min_visibility 0.6 drops it, 0.5 keeps it
    half = pp.Compose([CROP, pp.SanitizeBoxes(min_visibility=0.5)])(IMAGES, boxes=BOXES, labels=LABELS)
    assert half["kept"][0].tolist() == [0, 2]
    most = pp.Compose([CROP, pp.SanitizeBoxes(min_visibility=0.6)])(IMAGES, boxes=BOXES, labels=LABELS)
    assert most["kept"][0].tolist() == [0] and most["kept"][2].tolist() == []  # 60x40 of 80x60 is half too
    area = pp.Compose([CROP, pp.SanitizeBoxes(min_area=300)])(IMAGES, boxes=BOXES, labels=LABELS)
    assert area["kept"][0].tolist() == [0]  # 400 px kept, 200 px dropped
    size = pp.Compose([CROP, pp.SanitizeBoxes(min_size=15)])(IMAGES, boxes=BOXES, labels=LABELS)
    assert size["kept"][0].tolist() == [0]  # 20 high kept, 10 high dropped


def test_visibility_spans_stages():
    """Two stages (a border conflict): the fraction lost in each multiplies."""
    ops = [pp.Crop((60, 60), anchor=(0, 0), border="constant"), pp.RandomRotate(0, border="reflect"), pp.Crop((60, 50), anchor=(0, 0)),
           pp.SanitizeBoxes(min_visibility=0.3)]
    c = pp.Compose(ops)
    assert len(c.stages) == 2
    boxes = [np.array([[40.0, 0.0, 80.0, 10.0]])]  # 20 of 40 wide after the first crop, 10 after the second
    assert c(IMAGES[:1], boxes=boxes)["kept"][0].tolist() == []
    assert pp.Compose([*ops[:3], pp.SanitizeBoxes(min_visibility=0.25)])(IMAGES[:1], boxes=boxes)["kept"][0].tolist() == [0]


def test_instance_keypoints_go_with_their_boxes():
    kps = [np.arange(3 * 2 * 3, dtype=np.float64).reshape(3, 2, 3) % 9 + 1, None, np.ones((1, 2, 2))]
    out = pp.Compose([CROP, pp.SanitizeBoxes()])(IMAGES, boxes=BOXES, labels=LABELS, keypoints=kps)
    assert out["keypoints"][0].shape == (2, 2, 3) and out["keypoints"][1].shape == (0, 2, 3)
    assert torch.equal(out["keypoints"][0], torch.from_numpy(kps[0][[0, 2]]).float())
    assert out["keypoints"][2].tolist() == [[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]
    loose = pp.Compose([CROP, pp.SanitizeBoxes()])(IMAGES, boxes=BOXES, keypoints=[np.ones((5, 2)), None, None])
    assert loose["keypoints"][0].shape == (5, 3)  # points of no box are not dropped


def test_padded_form_holds_the_lists():
    ops = [CROP, pp.SanitizeBoxes()]
    kps = [np.ones((3, 2, 3)), None, np.ones((1, 2, 3))]
    lists = pp.Compose(ops)(IMAGES, boxes=BOXES, labels=LABELS, keypoints=kps)
    padded = pp.Compose(ops, targets="padded")(IMAGES, boxes=BOXES, labels=LABELS, keypoints=kps)
    assert padded["boxes"].shape == (3, 2, 4) and padded["box_counts"].tolist() == [2, 0, 1]
    assert padded["labels"].tolist() == [[1, 3], [-1, -1], [5, -1]]
    assert padded["kept"].tolist() == [[0, 2], [-1, -1], [0, -1]]
    assert padded["keypoints"].shape == (3, 2, 2, 3) and padded["keypoint_counts"].tolist() == [2, 0, 1]
    for i, n in enumerate([2, 0, 1]):
        assert torch.equal(padded["boxes"][i, :n], lists["boxes"][i]) and not padded["boxes"][i, n:].any()
        assert torch.equal(padded["keypoints"][i, :n], lists["keypoints"][i])
    for form in ("list", "padded"):
        det = to_detection(pp.Compose(ops, targets=form)(IMAGES, boxes=BOXES, labels=LABELS, keypoints=kps))
        assert [d["labels"].tolist() for d in det] == [[1, 3], [], [5]]
        assert [tuple(d["keypoints"].shape) for d in det] == [(2, 2, 3), (0, 2, 3), (1, 2, 3)]


def test_to_detection_masks_from_an_instance_map_and_from_channels():
    """An instance map (pixel value k + 1 marks box k) and a channel per box give the same
    per-box binary masks, for the boxes SanitizeBoxes kept."""
    ids, chans = [], []
    for b in BOXES:
        m = np.zeros((H, W), np.uint8)
        c = np.zeros((H, W, 3), np.uint8)
        for k, (x0, y0, x1, y1) in enumerate(b.astype(int)):
            m[y0:y1, x0:x1] = k + 1
            c[y0:y1, x0:x1, k] = 1
        ids.append(m)
        chans.append(c)
    ops = [CROP, pp.SanitizeBoxes()]
    a = to_detection(pp.Compose(ops)(IMAGES, boxes=BOXES, labels=LABELS, masks=ids))
    b = to_detection(pp.Compose(ops)(IMAGES, boxes=BOXES, labels=LABELS, masks=chans))
    for da, db, n in zip(a, b, [2, 0, 1]):
        assert da["masks"].shape == (n, 40, 60) and da["masks"].dtype == torch.uint8
        assert torch.equal(da["masks"], db["masks"])
        for box, mask in zip(da["boxes"], da["masks"]):  # each mask fills its box
            ys, xs = torch.nonzero(mask, as_tuple=True)
            assert [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1] == box.int().tolist()
    with pytest.raises(ValueError, match="labels"):
        to_detection(pp.Compose([CROP])(IMAGES, boxes=BOXES))


def test_to_detection_converts_other_formats():
    out = pp.Compose([CROP], box_format="cxcywhn")(IMAGES, boxes=[convert_boxes(b, "xyxy", "cxcywhn", [W, H])
                                                                  for b in BOXES], labels=LABELS)
    det = to_detection(out, "cxcywhn")
    assert det[0]["boxes"].tolist() == [[10, 10, 30, 30], [60, 40, 60, 40], [40, 20, 60, 30]]
    padded = pp.Compose([CROP], box_format="cxcywhn", targets="padded")(
        IMAGES, boxes=[convert_boxes(b, "xyxy", "cxcywhn", [W, H]) for b in BOXES], labels=LABELS)
    for a, b in zip(to_detection(padded, "cxcywhn"), det):
        assert torch.allclose(a["boxes"], b["boxes"], atol=1e-4) and torch.equal(a["labels"], b["labels"])


def test_a_pipeline_yields_labels_and_kept():
    samples = [{"image": IMAGES[i], "boxes": BOXES[i], "labels": LABELS[i], "name": f"s{i}"} for i in range(3)]
    compose = pp.Compose([CROP, pp.SanitizeBoxes()], targets="padded")
    with pp.Pipeline(samples, compose, 3, shuffle=False, num_threads=1) as pipe:
        batch = next(iter(pipe))
    assert batch["labels"].tolist() == [[1, 3], [-1, -1], [5, -1]] and batch["name"] == ["s0", "s1", "s2"]
    assert batch["kept"].tolist() == [[0, 2], [-1, -1], [0, -1]]


def test_sanitize_is_kept_in_evaluation_and_shown_in_the_plan():
    c = pp.Compose([pp.RandomIoUCrop(), pp.Resize((30, 30)), pp.SanitizeBoxes(min_area=4)])
    assert "then on the batch: SanitizeBoxes" in c.plan()
    e = c.eval()
    assert [type(op).__name__ for op in e.ops] == ["Resize", "SanitizeBoxes"] and e.targets.rules.min_area == 4
    assert repr(pp.SanitizeBoxes(min_area=4)) == "SanitizeBoxes(min_size=1.0, min_area=4.0, min_visibility=0.0)"
    with pytest.raises(ValueError, match="min_visibility"):
        pp.SanitizeBoxes(min_visibility=2)
    with pytest.raises(ValueError, match="min_size"):
        pp.SanitizeBoxes(min_size=-1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("form", ["list", "padded"])
def test_the_gpu_gives_the_cpus_targets(form):
    masks = [np.where(np.arange(W)[None, :] < 40, 1, 2).repeat(H, 0).astype(np.uint8)] * 3
    c = pp.Compose([pp.RandomZoomOut(p=1.0), pp.RandomIoUCrop(), pp.Resize((32, 32)), pp.RandomFlip(),
                    pp.SanitizeBoxes()], targets=form)
    kw = {"boxes": BOXES, "labels": LABELS, "masks": masks, "seed": 1}
    cpu, gpu = c(IMAGES, **kw), c(IMAGES, device="cuda", **kw)
    assert gpu["image"].is_cuda and torch.equal(gpu["masks"].cpu(), cpu["masks"])
    for key in ("boxes", "labels", "kept"):
        a, b = cpu[key], gpu[key]
        assert all(torch.equal(x, y.cpu()) for x, y in zip(a, b)) if form == "list" else torch.equal(a, b.cpu())
    for d_cpu, d_gpu in zip(to_detection(cpu), to_detection(gpu)):
        assert d_gpu["masks"].is_cuda and torch.equal(d_cpu["masks"], d_gpu["masks"].cpu())


def test_sanitize_boxes_is_one_targets_op_and_leaves_a_plain_call_a_tensor():
    """SanitizeBoxes states rules on the targets: without targets a call still returns the
    image tensor; a second SanitizeBoxes is refused rather than one of them silently ignored."""
    out = pp.Compose([CROP, pp.SanitizeBoxes()])(IMAGES)
    assert isinstance(out, torch.Tensor)
    with pytest.raises(ValueError, match="a second SanitizeBoxes"):
        pp.Compose([CROP, pp.SanitizeBoxes(), pp.SanitizeBoxes(min_size=5)])
    with pytest.raises(ValueError, match="comes after the batch op SanitizeBoxes"):
        pp.Compose([pp.SanitizeBoxes(), CROP])


def test_targets_from_mixed_types_and_the_first_bad_sample_named():
    """Boxes and labels given as float32, int, lists, tensors or nothing become float64 and
    int64 as one batch; a bad sample is named in the batch's order, whatever is wrong with it."""
    boxes = [np.array([[1, 2, 3, 4]], np.float32), torch.tensor([[0, 0, 5, 5]], dtype=torch.int32), None,
             [[1, 1, 2.5, 2], [0, 0, 1, 1]], np.zeros((0, 4))]
    labels = [np.array([3], np.int32), torch.tensor([4]), None, [5.0, 6.0], []]
    t = Targets.from_args(5, boxes=boxes, labels=labels)
    assert t.boxes.data.dtype == np.float64 and t.boxes.labels.dtype == np.int64
    assert t.boxes.data.tolist() == [[1, 2, 3, 4], [0, 0, 5, 5], [1, 1, 2.5, 2], [0, 0, 1, 1]]
    assert t.boxes.counts.tolist() == [1, 1, 0, 2, 0] and t.boxes.labels.tolist() == [3, 4, 5, 6]
    fine, inf, wide = np.zeros((1, 4)), np.array([[0, 0, 1, 1], [0, 0, np.inf, 1]]), np.zeros((1, 5))
    for given, message in (([fine, inf, wide], r"sample 1: boxes: non-finite values \(row 1\)"),
                           ([fine, wide, inf], "sample 1: boxes: expected shape"),
                           ([fine, fine, inf], r"sample 2: boxes: non-finite values \(row 1\)")):
        with pytest.raises(SampleError, match=message):
            Targets.from_args(3, boxes=given)
    points = Targets.from_args(2, keypoints=[np.array([[1.0, 2.0]]), np.array([[3, 4, 0]], np.int64)]).keypoints
    assert points.data.tolist() == [[1, 2, 1], [3, 4, 0]]  # (x, y) visible, (x, y, v) as given
