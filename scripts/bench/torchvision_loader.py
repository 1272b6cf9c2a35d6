#!/usr/bin/env python3
"""The peer of mlperf-run's ImageNet training pipeline for benchmark a) (scripts/bench_data.sh).

torchvision ImageFolder + RandomResizedCrop + RandomHorizontalFlip + ToTensor (PIL decode),
DataLoader with num_workers=0, so everything runs in this one process on one core.
Prints one line: images, seconds, images/s.
"""
import argparse
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True, help="an ImageFolder (<class>/<image>.JPEG)")
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--scale-min", type=float, default=0.08, help="RandomResizedCrop scale lower bound")
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(1)
    tf = transforms.Compose(
        [
            transforms.RandomResizedCrop(a.size, scale=(a.scale_min, 1.0)),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
        ]
    )
    ds = datasets.ImageFolder(a.dir, transform=tf)
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=0)
    next(iter(loader))  # warm-up: imports, page cache
    images = 0
    checksum = 0.0
    start = time.perf_counter()
    for _ in range(a.epochs):
        for x, y in loader:
            images += x.shape[0]
            checksum += float(x[:, :, ::37, ::41].sum())
    secs = time.perf_counter() - start
    print(
        f"torchvision ImageFolder+RandomResizedCrop+flip+ToTensor (PIL, num_workers=0): "
        f"{images} images in {secs:.2f}s = {images / secs:.1f} images/s per core (checksum {checksum:.0f})"
    )


if __name__ == "__main__":
    main()
