"""SGLang's profile routes.

SGLang always registers ``/start_profile`` (GET or POST) with a ``ProfileReq`` body:
``output_dir``, ``start_step``, ``num_steps``, ``activities``, ``with_stack``,
``record_shapes``, ``profile_by_stage``, ``profile_prefix`` ... (``with_stack`` and
``record_shapes`` default to true, so attach asks for false). It answers once profiling is
armed, not when the trace is written; with ``num_steps`` the scheduler stops by itself after
that many steps and writes one file per scheduler rank:
``[PREFIX-]<id>-TP-<r>[-DECODE|-EXTEND].trace.json.gz``. Steps are ``step[DECODE bs=B]`` /
``step[EXTEND bs=B toks=T]`` annotations (since 0.5.11). ``/stop_profile`` ends a profile early;
after one ended by itself it answers that none is running, which is not an error here.

``start_step`` counts the scheduler's forward passes since the server started, which a client
cannot know: attach skips steps by waiting before it starts instead.
"""

from __future__ import annotations

import re

from hostgap.server.attach.client import LOW_OVERHEAD, ProfileClient, ProfileRequest


class SglangClient(ProfileClient):
    engine = "sglang"
    protocol = "sglang-num-steps"
    self_stopping = True
    worker_file = re.compile(r"-TP-(\d+)(?:-DECODE|-EXTEND)?\.trace\.json(\.gz)?$")
    frontend_file = None

    def start_request(self, req: ProfileRequest) -> tuple[str, dict | None]:
        device = str(self.info.get("device") or "cuda").lower()
        activities = ["CPU"] if device == "cpu" else ["CPU", "GPU"]
        body = {
            "output_dir": req.output_dir,
            "num_steps": req.steps,
            "activities": activities,
            "with_stack": False,
            "record_shapes": False,
            "profile_by_stage": False,
            "profile_prefix": req.prefix,
            "merge_profiles": False,
        }
        self.settings.requested = {**body, **LOW_OVERHEAD}
        return "/start_profile", body

    def explain_stop_failure(self, status: int, text: str) -> str | None:
        if "not in progress" in text.lower() or "no profil" in text.lower():
            return None  # it ended by itself after num_steps
        return super().explain_stop_failure(status, text)

    def world_size(self) -> int | None:
        tp = self.info.get("tp_size")
        pp = self.info.get("pp_size") or 1
        return int(tp) * int(pp) if isinstance(tp, int) and isinstance(pp, int) else None
