"""IAM for the two roles (IRSA), each trusted by one ServiceAccount of this namespace only.

The serve role (the replicas, app.adapters.dynamodb, app.adapters.snapshot_store and
app.adapters.model_store; the head, which builds the applications, loads from the store too):
- GetItem and BatchGetItem on the one feature table: no Scan, Query, writes, indexes or
  other tables;
- the precomputed-offers snapshots the batch job writes: GetObject on the snapshot files
  only (`<prefix>/*/_offers.snapshot`, never the Parquet or a half-written `.partial`), and
  ListBucket restricted by `s3:prefix` to the output prefix (finding the newest run);
- the published ensemble versions: GetObject under the model store's prefix (manifests and
  artifacts; boto3's download_file is a HeadObject and ranged GetObjects) and ListBucket
  restricted by `s3:prefix` to it, so a version that is not published is an honest 404
  ("not published") rather than a 403. Nothing else of the store's bucket, and no write:
  publishing is another role's (docs/kubernetes.md).

The batch role (the RayJob's head and workers, app.batch):
- Scan on the one table (the parallel Scan of every player);
- under the output prefix: PutObject (Parquet, the snapshot, `_SUCCESS.json`; multipart
  uploads are PutObject too) and AbortMultipartUpload (a failed upload cleans up);
  GetObject, because the driver reads the run back (row counts from the Parquet footers, the
  three columns the snapshot is built from) and S3 copies need read on the source; ListBucket
  restricted by `s3:prefix`, as pyarrow lists "directories"; DeleteObject on the snapshot's
  temporary name only: it is written as `_offers.snapshot.partial` and moved into place,
  which on S3 is a copy and a delete. The role can overwrite but never delete a finished
  run's files;
- the published ensemble versions, read-only as for the serve role: the driver and every
  scoring actor load the version they score from the model store (`--artifacts`, through
  their pod's cache), so GetObject under the store's prefix and ListBucket restricted by
  `s3:prefix` to it (an honest 404 for a version not published). No write there: the output
  prefix, where it writes, may not overlap the store's (app.k8s.profile checks it).

The publisher (not a cluster role: the identity that runs `offers publish` at release, and
`offers versions`): under the model store's prefix GetObject (is the version published
already?), PutObject and AbortMultipartUpload (artifacts, then the manifest; large artifacts
are multipart uploads), and ListBucket restricted by `s3:prefix` (the versions list, honest
404s). No DeleteObject: a published version is never removed or replaced by this role (the
store refuses to publish a version again with other contents; S3 cannot say "create only",
so PutObject could still overwrite a key: S3 Object Lock or versioning on the bucket is the
guard against that).

pyarrow's S3 requests, as measured against an S3 endpoint: HeadObject/GetObject need
s3:GetObject; ListObjectsV2 needs s3:ListBucket (S3 evaluates `s3:prefix` as the requested
key when it decides between 404 and 403 for a missing key, so the prefix condition still
gives honest 404s); a move is CopyObject + DeleteObject + a PutObject of the parent "folder"
marker. CreateDir is the one call these roles do not allow: it asks HeadBucket (s3:ListBucket
with no prefix) and puts folder markers from the bucket root down, so writers must not ask
for it (Ray Data: `write_parquet(..., try_create_dir=False)`).
"""

from __future__ import annotations

from typing import Any

from app.contract.offer_snapshot import SNAPSHOT_FILENAME
from app.k8s.profile import ProductionProfile

SERVE_ACTIONS = ("dynamodb:BatchGetItem", "dynamodb:GetItem")
BATCH_SCAN_ACTIONS = ("dynamodb:Scan",)
BATCH_WRITE_ACTIONS = ("s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject")
PUBLISH_ACTIONS = ("s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject")
# app.adapters.snapshot_store.write_snapshot writes the snapshot under this name, then moves
# it into place (tests/unit/k8s check the writer against this policy).
SNAPSHOT_PARTIAL = f"{SNAPSHOT_FILENAME}.partial"


def serve_policy(profile: ProductionProfile) -> dict[str, Any]:
    return _policy(
        _allow("ReadPlayerFeatures", SERVE_ACTIONS, profile.table_arn()),
        _allow(
            "ReadPrecomputedSnapshots",
            ("s3:GetObject",),
            _object_arn(profile, f"*/{SNAPSHOT_FILENAME}"),
        ),
        *_read_runs_and_versions(profile),
    )


def batch_policy(profile: ProductionProfile) -> dict[str, Any]:
    return _policy(
        _allow("ScanPlayerFeatures", BATCH_SCAN_ACTIONS, profile.table_arn()),
        _allow("WriteBatchRuns", BATCH_WRITE_ACTIONS, _object_arn(profile, "*")),
        _allow(
            "MoveSnapshotIntoPlace",
            ("s3:DeleteObject",),
            _object_arn(profile, f"*/{SNAPSHOT_PARTIAL}"),
        ),
        *_read_runs_and_versions(profile),
    )


def publish_policy(profile: ProductionProfile) -> dict[str, Any]:
    store = profile.model_store
    return _policy(
        _allow("PublishVersions", PUBLISH_ACTIONS, _s3_arn(store.bucket(), store.prefix(), "*")),
        _list(store.bucket(), store.prefix(), "ListPublishedVersions"),
    )


def serve_trust_policy(profile: ProductionProfile) -> dict[str, Any]:
    return _trust_policy(profile, profile.service_account)


def batch_trust_policy(profile: ProductionProfile) -> dict[str, Any]:
    return _trust_policy(profile, profile.batch.service_account)


def _object_arn(profile: ProductionProfile, below_prefix: str) -> str:
    """Objects under the batch output prefix."""
    return _s3_arn(profile.batch.bucket(), profile.batch.prefix(), below_prefix)


def _list_prefix(profile: ProductionProfile, sid: str) -> dict[str, Any]:
    """Listing under the batch output prefix."""
    return _list(profile.batch.bucket(), profile.batch.prefix(), sid)


def _read_runs_and_versions(profile: ProductionProfile) -> list[dict[str, Any]]:
    """What the serve and batch roles alike read: the batch runs' listing (the newest
    snapshot is found by it) and the published versions (GetObject under the model store's
    prefix, and listing it: a missing version is then a 404, not a 403)."""
    store = profile.model_store
    return [
        _list_prefix(profile, "ListBatchRuns"),
        _allow(
            "ReadPublishedVersions", ("s3:GetObject",), _s3_arn(store.bucket(), store.prefix(), "*")
        ),
        _list(store.bucket(), store.prefix(), "ListPublishedVersions"),
    ]


def _policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def _allow(sid: str, actions: tuple[str, ...], resource: str) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": list(actions), "Resource": [resource]}


def _s3_arn(bucket: str, prefix: str, below_prefix: str) -> str:
    return f"arn:aws:s3:::{bucket}/{prefix}/{below_prefix}"


def _list(bucket: str, prefix: str, sid: str) -> dict[str, Any]:
    return {
        **_allow(sid, ("s3:ListBucket",), f"arn:aws:s3:::{bucket}"),
        "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
    }


def _trust_policy(profile: ProductionProfile, service_account: str) -> dict[str, Any]:
    provider = profile.aws.eks_oidc_provider
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {
                    "Federated": f"arn:aws:iam::{profile.aws.account_id}:oidc-provider/{provider}"
                },
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringEquals": {
                        f"{provider}:sub": (
                            f"system:serviceaccount:{profile.namespace}:{service_account}"
                        ),
                        f"{provider}:aud": "sts.amazonaws.com",
                    }
                },
            }
        ],
    }
