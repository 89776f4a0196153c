"""Checkpoints across ranks: which step every rank resumes from (the newest one intact on
any reader, loaded by one rank and broadcast) and how a step is saved (RNG state gathered,
written by the checkpoint writers). `self` is the trainer.Trainer that runs the job."""

from __future__ import annotations

import torch
import torch.distributed as dist

from trainer import checkpoint
from trainer.config import CheckpointError


def resume(self, model, opt):
    """Every rank resumes from the newest step that any checkpoint reader
    has intact, or fails when checkpoints exist but none is readable.

    Readers: global rank 0 with shared storage (the directory need only be
    visible there), every node's local rank 0 with node-local storage.
    Each scans its directory (cheap check, stray temp files removed); the
    ranks gather the newest valid step of each; the lowest rank that has
    the newest loads it fully and broadcasts it. If that load fails, the
    next candidate is tried -- the same choice on every rank, so the
    collectives match."""
    cfg = self.cfg
    info = None
    if self.ckpt_writer:
        found = checkpoint.scan(self.ckpt_dir, remove_temps=True)
        info = {"rank": self.rank, "node": self.node_rank, "dir": self.ckpt_dir,
                "valid": [s for s, _ in found.valid], "bad": found.bad, "temps": found.temps_removed}
    infos = [None] * self.ranks.world_size
    dist.all_gather_object(infos, info, group=self.cpu_group)
    readers = [i for i in infos if i is not None]
    where = {i["rank"]: f"node {'?' if i['node'] is None else i['node']}" for i in readers}
    bad = [(where[i["rank"]], path, why) for i in readers for path, why in i["bad"]]
    for i in readers:
        for path in i["temps"]:
            self.log(f"removed {path} ({where[i['rank']]}): temp file of an interrupted save")
    candidates = {i["rank"]: list(i["valid"]) for i in readers}
    payload = None
    while any(candidates.values()):
        newest = max(steps[0] for steps in candidates.values() if steps)
        src = min(r for r, steps in candidates.items() if steps and steps[0] == newest)
        box = [None]
        if self.rank == src:
            path = checkpoint.path_for(self.ckpt_dir, newest)
            try:
                box[0] = ("ok", checkpoint.load(path, newest))
            except checkpoint.Unreadable as exc:
                box[0] = ("bad", path, str(exc))
        dist.broadcast_object_list(box, src=src, group=self.cpu_group)
        if box[0][0] == "ok":
            payload = box[0][1]
            break
        bad.append((where[src], box[0][1], box[0][2]))
        candidates[src].pop(0)
    if payload is not None:
        for node, path, why in bad:
            if checkpoint.step_of(path) > payload["step"]:
                self.log(f"warning: skipping unreadable checkpoint {path} ({node}): {why}")
    elif bad:
        listing = "; ".join(f"{path} ({node}: {why})" for node, path, why in bad)
        if not cfg.ignore_bad_checkpoints:
            raise CheckpointError(
                f"checkpoints exist but none is readable: {listing}. Remove or repair them, or pass "
                "--ignore-bad-checkpoints to start at step 0")
        self.log(f"warning: --ignore-bad-checkpoints: no readable checkpoint ({listing}); starting at step 0")
        return 0, None, None
    if payload is None:
        dirs = ", ".join(sorted({i["dir"] for i in readers}))
        self.log(f"no checkpoint in {dirs}; starting at step 0")
        if cfg.restart:
            self.log(f"warning: this is restart {cfg.restart} of the job and no checkpoint was found: either "
                     "no attempt got as far as one, or the checkpoint directory is not the one they used "
                     "(a lost or unmounted volume looks the same)")
        return 0, None, None
    model.load_state_dict(payload["model"])
    opt.load_state_dict(payload["optimizer"])  # moves optimizer state to the params' device
    rngs = payload.get("rng") or []
    if len(rngs) == self.ranks.world_size:
        checkpoint.set_rng_state(rngs[self.rank], self.place.device)
    else:
        self.log(f"checkpoint has RNG state for {len(rngs)} ranks, job has {self.ranks.world_size}; "
                 "RNG streams restart from the seed")
    self.log(f"resumed from checkpoint {payload['path']} ({where[src]}) at step {payload['step']}")
    return payload["step"], payload.get("first_loss"), payload["step"]

def save(self, model, opt, step, first_loss):
    # RNG state differs per rank, so it is gathered; the weights and the
    # optimizer state are identical on all ranks and come from the writer's own.
    rngs = [None] * self.ranks.world_size
    dist.all_gather_object(rngs, checkpoint.rng_state(self.place.device), group=self.cpu_group)
    if not self.ckpt_writer:
        return
    payload = {
        "step": step,
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizer": _to_cpu(opt.state_dict()),
        "rng": rngs,
        "first_loss": first_loss,
        "world_size": self.ranks.world_size,
        "config": {"seed": self.cfg.seed, "batch_size": self.cfg.batch_size,
                   "dataset_size": self.cfg.dataset_size, "hidden": self.cfg.hidden},
    }
    path = checkpoint.save(self.ckpt_dir, step, payload, self.cfg.keep_checkpoints)
    if self.cfg.checkpoint_storage == "node-local":
        self.node_log(f"checkpoint {path}")
    else:
        self.log(f"checkpoint {path}")


def _to_cpu(obj):
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj
