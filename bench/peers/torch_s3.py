#!/usr/bin/python3
"""PyTorch peer for the remote benchmark (bench/remote_latency.py --peer):
the image_folder pipeline read from an S3 endpoint with boto3, as a
DataLoader user writes it, or from local files.

The pipeline is remote_latency.py's: decode (PIL, libjpeg-turbo),
RandomResizedCrop(224), PILToTensor (uint8, as sluice's records are),
batches of 64, in sorted order, for --epochs passes. The dataset is a
map-style torch Dataset that lists the prefix once (ListObjectsV2, paged,
by boto3's paginator; the class is the key's directory) and gets a whole
batch of indices at a time (a BatchSampler as the sampler, batch_size=None):
each DataLoader worker keeps one boto3 client and a thread pool of
--threads that GETs the batch's 64 objects at once, so that up to
workers x threads requests are in flight, as loaders over object storage
are written to hide latency (a plain __getitem__ per object keeps one
request in flight per worker). boto3 signs every request (SigV4) and reads
each body whole.

--read-only GETs (or reads) the bytes and decodes nothing: what the client
alone costs per object.

Prints one line of JSON: records, seconds, records/s (from the listing to
the last batch; worker start-up included), CPU seconds (this process from
then on and its workers, getrusage), the settings.

Usage: torch_s3.py (--endpoint URL --bucket B | --local DIR) --prefix P
                   [--epochs E] [--workers W] [--threads T] [--read-only]
                   [--ca-bundle PEM]
Credentials come from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY as boto3
reads them.
"""

import argparse
import concurrent.futures
import io
import json
import os
import resource
import sys
import time

try:
    import torch
    from torchvision import transforms as T
    from PIL import Image
except ImportError as e:  # pragma: no cover
    sys.exit("torch_s3.py: %s (apt-get install python3-torch "
             "python3-torchvision python3-pil, or scripts/setup)" % e)

BATCH = 64


def s3_client(endpoint, threads, ca_bundle=None):
    try:
        import boto3
        from botocore.config import Config
    except ImportError as e:  # pragma: no cover
        sys.exit("torch_s3.py: %s (apt-get install python3-boto3, or "
                 "scripts/setup)" % e)
    return boto3.client(
        "s3", endpoint_url=endpoint, verify=ca_bundle,
        region_name=os.environ.get("AWS_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"},
                      max_pool_connections=max(10, threads),
                      retries={"max_attempts": 3, "mode": "standard"}))


class Photos(torch.utils.data.Dataset):
    """(key, label) pairs under the prefix; ds[list of indices] is a batch."""

    def __init__(self, args):
        self.args = args
        self.client = None  # made in each worker (boto3 clients do not fork)
        self.pool = None
        if args.local:
            base = os.path.join(args.local, args.prefix)
            keys = sorted(os.path.relpath(os.path.join(d, f), args.local)
                          for d, _, fs in os.walk(base) for f in fs)
        else:
            pages = s3_client(args.endpoint, 1, args.ca_bundle).get_paginator(
                "list_objects_v2").paginate(Bucket=args.bucket,
                                            Prefix=args.prefix)
            keys = sorted(o["Key"] for p in pages for o in p.get("Contents", []))
        classes = sorted({k.split("/")[-2] for k in keys})
        index = {c: i for i, c in enumerate(classes)}
        self.items = [(k, index[k.split("/")[-2]]) for k in keys]
        if len(self.items) < BATCH:
            sys.exit("torch_s3.py: %d objects under %s, fewer than a batch"
                     % (len(self.items), args.prefix))
        self.crop = T.RandomResizedCrop(224)
        self.to_tensor = T.PILToTensor()

    def __len__(self):
        return len(self.items)

    def fetch(self, key):
        if self.args.local:
            with open(os.path.join(self.args.local, key), "rb") as f:
                return f.read()
        return self.client.get_object(Bucket=self.args.bucket,
                                      Key=key)["Body"].read()

    def __getitem__(self, indices):
        if self.pool is None:
            if not self.args.local:
                self.client = s3_client(self.args.endpoint, self.args.threads,
                                        self.args.ca_bundle)
            self.pool = concurrent.futures.ThreadPoolExecutor(self.args.threads)
        keys = [self.items[i][0] for i in indices]
        bodies = list(self.pool.map(self.fetch, keys))
        labels = torch.tensor([self.items[i][1] for i in indices])
        if self.args.read_only:
            return torch.tensor([len(b) for b in bodies]), labels
        images = [self.to_tensor(self.crop(
            Image.open(io.BytesIO(b)).convert("RGB"))) for b in bodies]
        return torch.stack(images), labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--endpoint")
    ap.add_argument("--bucket")
    ap.add_argument("--ca-bundle", help="PEM file that verifies an https:// "
                    "endpoint's certificate")
    ap.add_argument("--local", help="read DIR/PREFIX's files instead")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=16,
                    help="GETs in flight per worker")
    ap.add_argument("--read-only", action="store_true")
    args = ap.parse_args()
    if not args.local and not (args.endpoint and args.bucket):
        ap.error("give --endpoint and --bucket, or --local")
    if args.epochs < 1 or args.workers < 0 or args.threads < 1:
        ap.error("--epochs and --threads must be >= 1, --workers >= 0")
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    ds = Photos(args)
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(ds), BATCH, drop_last=False)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None,
                                         num_workers=args.workers)
    records = 0
    for _ in range(args.epochs):
        for x, y in loader:
            records += len(y)
    seconds = time.perf_counter() - t0
    del loader
    # From t0 on: torch's import is not counted (sluice's start-up is).
    cpu = -(r0.ru_utime + r0.ru_stime)
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        cpu += r.ru_utime + r.ru_stime
    print(json.dumps({"records": records, "seconds": round(seconds, 4),
                      "rate": round(records / seconds, 2),
                      "cpu": round(cpu, 4), "workers": args.workers,
                      "threads": args.threads, "read_only": args.read_only}))


if __name__ == "__main__":
    main()
