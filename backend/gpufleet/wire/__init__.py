"""The shapes on the wire: every request and response model of the HTTP API and the live stream.

One module per resource. The API's routes, the Python client and the CLI
import them from here; nothing here imports FastAPI, so the client works
without the server's web stack. The live stream's frames (``live``) and the
training statuses (``gpufleet.db.statuses``) are also named enums and models
in the OpenAPI document (``components``), from which the dashboard's types
are generated (``frontend/scripts/gen-api.sh``).

Each shape is also a name of this package, loaded with its module on first use
(``wire.TrainingPublic``), so a caller that needs a few shapes (the client, the
CLI) builds only their models, never all of them.
"""

from __future__ import annotations

import importlib
from typing import Any

# Where each shape is defined: here, and nowhere else. A training's, a sweep's and a session's request
# bodies are checked further by their domain (recipes, the fleet, limits) before anything is written.
HOMES: dict[str, tuple[str, ...]] = {
    "gpufleet.wire.auth": ("DownloadTicket", "DownloadTicketAsk", "SignIn", "SignInLink", "SignedIn", "SignedOut",
                           "WSTicket", "WhoAmI",),
    "gpufleet.wire.bookings": ("BookedGPU", "BookingConflictPublic", "BookingCreate", "BookingInTheWay",
                               "BookingPublic", "BookingWindow", "BookingsPublic", "FeedCreate", "FeedCreated",
                               "FreeWindowPublic",),
    "gpufleet.wire.code": ("CodePublic", "CodeUploadPublic",),
    "gpufleet.wire.live": ("LiveBatch", "LiveError", "LiveHello", "LivePing", "LivePong", "LiveResumed",
                           "LiveSnapshot", "LiveSubscribe", "LiveUnsubscribe", "LiveUnsubscribed", "LiveUpdate",),
    "gpufleet.wire.metrics": ("HistoryPoint", "HistoryPublic", "HistorySeries", "LivePublic",),
    "gpufleet.wire.pools": ("PoolCreate", "PoolCreateBase", "PoolNode", "PoolPublic", "PoolPublicBase", "PoolsPublic",
                            "SlurmPoolCreate", "SlurmPoolPublic",),
    "gpufleet.wire.recipes": ("RecipeFieldPublic", "RecipePublic", "RecipesPublic",),
    "gpufleet.wire.selection": ("AcrossHostsPublic", "CandidatePublic", "EstimatePublic", "FitBody", "FitOptionPublic",
                                "FitPublic", "PoolFitPublic", "ProblemPublic", "RecommendBody", "RecommendationPublic",
                                "ValidateBody", "ValidatePart", "ValidationPublic",),
    "gpufleet.wire.sharing": ("GroupCreate", "GroupPublic", "GroupQuota", "GroupQuotaPublic", "GroupsPublic",
                              "StoredPublic", "UsagePublic", "UsageRowPublic", "UserQuota", "UserQuotaPublic",
                              "UserQuotasPublic",),
    "gpufleet.wire.sweeps": ("SweepCurve", "SweepCurvesPublic", "SweepDetail", "SweepPublic", "SweepTrialPublic",
                             "SweepsPublic",),
    "gpufleet.wire.system": ("DrainPublic", "DrainRequest", "GPUAvailabilityPublic", "GPULive", "GPUProcessPublic",
                             "GPUPublic", "GPUsPublic", "Health", "HealthClearedPublic", "HostPublic", "HostTopology",
                             "HostsPublic", "LinkPublic", "TopologyPublic",),
    "gpufleet.wire.trainings": ("TrainingBatchPublic", "TrainingEventPublic", "TrainingEventsPublic",
                                "TrainingFilePublic", "TrainingFilesPublic", "TrainingGPU", "TrainingHostPublic",
                                "TrainingLogPublic", "TrainingMetricPublic", "TrainingMetricsPublic", "TrainingPublic",
                                "TrainingsPublic",),
    "gpufleet.wire.webhooks": ("WebhookCreate", "WebhookCreated", "WebhookPublic", "WebhookTestPublic",
                               "WebhookUpdate", "WebhooksPublic",),
    "gpufleet.wire.users": ("TokenCreate", "TokenCreated", "TokenPublic", "TokensPublic", "UserCreate", "UserPublic",
                            "UserUpdate", "UsersPublic",),
    "gpufleet.wire.training_requests": ("BatchItem", "TrainingBatchCreate", "TrainingCreate", "TrainingResume",),
    "gpufleet.wire.sweep_requests": ("Asha", "ScriptTemplate", "SpaceRange", "SweepCreate",),
    "gpufleet.wire.sessions": ("NotebookOpen", "SessionCreate", "SessionExtend", "SessionLimitPublic",
                               "SessionLimitSet", "SessionList", "SessionPublic", "ShellTarget",),
}
_MODULE_OF = {name: module for module, names in HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'gpufleet.wire' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
