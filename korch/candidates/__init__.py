"""Candidate kernels: convex, connected sets of primitives that one backend may run as one unit."""

from korch.candidates.candidate import Candidate, extract_subgraph
from korch.candidates.enumerate import CandidateLimits, enumerate_candidates, why_not_candidate
from korch.candidates.key import structural_key
from korch.candidates.regions import RegionLimits, opaque_regions, region_candidates

__all__ = ["Candidate", "CandidateLimits", "RegionLimits", "enumerate_candidates", "extract_subgraph",
           "opaque_regions", "region_candidates", "structural_key", "why_not_candidate"]
