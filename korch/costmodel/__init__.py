"""Cost models: predict a candidate kernel's time per backend from its features (issue 12's first part)."""

from korch.costmodel.features import FEATURE_NAMES, FEATURES_VERSION, Features, candidate_features, features_by_key
from korch.costmodel.model import CostModel, CostModelSettings, MachinePeaks, load_or_train, train
from korch.costmodel.quality import pairwise_accuracy

__all__ = ["FEATURE_NAMES", "FEATURES_VERSION", "CostModel", "CostModelSettings", "Features", "MachinePeaks",
           "candidate_features", "features_by_key", "load_or_train", "pairwise_accuracy", "train"]
