"""Typed view of `conf/storage.yaml`; every default lives in the YAML."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from conf import load


@dataclass(frozen=True)
class S3Settings:
    endpoint_url: str
    region: str
    path_style: bool
    max_attempts: int
    connect_timeout_s: float
    read_timeout_s: float


@dataclass(frozen=True)
class GcsSettings:
    project: str
    endpoint_url: str
    anonymous: bool


@dataclass(frozen=True)
class UploadSettings:
    retries: int
    backoff_initial_s: float
    backoff_max_s: float
    workers: int


@dataclass(frozen=True)
class DownloadSettings:
    retries: int
    backoff_initial_s: float
    backoff_max_s: float


@dataclass(frozen=True)
class StorageConfig:
    s3: S3Settings
    gcs: GcsSettings
    upload: UploadSettings
    download: DownloadSettings


def load_storage_config(overrides: Iterable[str] = ()) -> StorageConfig:
    return load("storage", StorageConfig, overrides)
