"""IAM for the serve role (IRSA): read one table's items, trusted by one ServiceAccount.

The online path does GetItem and BatchGetItem (app.adapters.dynamodb) and nothing else, on
the one feature table: no Scan, Query, writes, indexes or other tables. The trust policy
lets only this namespace's ServiceAccount, through the cluster's OIDC provider, assume it.
"""

from __future__ import annotations

from typing import Any

from app.k8s.profile import ProductionProfile

SERVE_ACTIONS = ("dynamodb:BatchGetItem", "dynamodb:GetItem")


def serve_policy(profile: ProductionProfile) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ReadPlayerFeatures",
                "Effect": "Allow",
                "Action": list(SERVE_ACTIONS),
                "Resource": [profile.table_arn()],
            }
        ],
    }


def serve_trust_policy(profile: ProductionProfile) -> dict[str, Any]:
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
                            f"system:serviceaccount:{profile.namespace}:{profile.service_account}"
                        ),
                        f"{provider}:aud": "sts.amazonaws.com",
                    }
                },
            }
        ],
    }
