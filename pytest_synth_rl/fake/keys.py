"""The task app's key: uploaded as a libsodium sealed box (contract §10.5), which key rollouts send,
and the probe of a task app with each key before a submit (contract §10.3)."""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import httpx
from nacl.exceptions import CryptoError
from nacl.public import PrivateKey, SealedBox

from pytest_synth_rl.secrets.masking import Secret, key_problem, mask_secret
from pytest_synth_rl.taskapp.health import check_task_app_health
from pytest_synth_rl.taskapp.loopback import is_loopback_url

SEALED_BOX_ALG = "libsodium.sealedbox.v1"
#: The largest environment key the fake accepts (the hosted backend's limit).
MAX_ENV_KEY_BYTES = 8 * 1024


class EnvKeyRejected(ValueError):
    """An uploaded environment key that cannot be used; ``str()`` says what was wrong."""


class EnvKeys:
    """The fake's key pair, the uploaded key, and the keys it would send to task apps, best first."""

    def __init__(self, task_app_key: Secret | None = None) -> None:
        self._box_key = PrivateKey.generate()
        self._task_app_key = task_app_key
        self._uploaded: Secret | None = None
        self._lock = threading.Lock()
        #: Whether an upload replaced another key: two runs sharing this backend with their own keys.
        self.key_replaced = False

    @property
    def public_key_b64(self) -> str:
        """The fake's X25519 public key, base64: clients seal the environment key to it."""
        return base64.b64encode(bytes(self._box_key.public_key)).decode("ascii")

    def open_upload(self, name: object, ciphertext_b64: object) -> None:
        """Open a sealed environment key and keep it; :class:`EnvKeyRejected` names what was wrong."""
        if name != "ENVIRONMENT_API_KEY":
            raise EnvKeyRejected(
                f"'name' must be \"ENVIRONMENT_API_KEY\", got {name!r:.60}: it is the only key the "
                "trainer sends to task apps"
            )
        if not isinstance(ciphertext_b64, str) or not ciphertext_b64:
            raise EnvKeyRejected(
                "'ciphertext_b64' must be a non-empty base64 string (the libsodium sealed box of the key, "
                "sealed to GET /api/v1/crypto/public-key)"
            )
        try:
            sealed = base64.b64decode(ciphertext_b64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise EnvKeyRejected(f"'ciphertext_b64' is not valid base64 ({exc})") from None
        try:
            plain = SealedBox(self._box_key).decrypt(sealed)
        except CryptoError:
            raise EnvKeyRejected(
                f"'ciphertext_b64' does not open as a sealed box ({SEALED_BOX_ALG}) for this backend's "
                "public key: seal the key with the public key from GET /api/v1/crypto/public-key of this "
                "same backend (each fake makes a new key pair)"
            ) from None
        if len(plain) > MAX_ENV_KEY_BYTES:
            raise EnvKeyRejected(
                f"the key is {len(plain)} bytes; at most {MAX_ENV_KEY_BYTES} bytes are accepted"
            )
        try:
            text = plain.decode("utf-8")
        except UnicodeDecodeError:
            raise EnvKeyRejected("the key is not UTF-8 text") from None
        if not text.strip():
            raise EnvKeyRejected("the key is empty")
        problem = key_problem(text)
        if problem is not None:  # rollouts send it in headers: refused now, not at every rollout
            raise EnvKeyRejected(f"the key {problem}")
        self.keep(Secret(text))

    def keep(self, key: Secret | None) -> None:
        """Use *key* for rollouts, as an uploaded key (it replaces an earlier one; None forgets)."""
        with self._lock:
            previous, self._uploaded = self._uploaded, key
            if previous is not None and key is not None and key != previous:
                self.key_replaced = True

    @property
    def has_env_key(self) -> bool:
        return self._uploaded is not None

    def candidates(self) -> list[tuple[str, Secret]]:
        """``(source, key)`` for each distinct key: uploaded, ``task_app_api_key``, then the environment's."""
        found: list[tuple[str, Secret]] = []
        env = os.environ.get("ENVIRONMENT_API_KEY", "").strip()
        for source, key in (
            ("uploaded", self._uploaded),
            ("task_app_api_key", self._task_app_key),
            ("env:ENVIRONMENT_API_KEY", Secret(env) if env else None),
        ):
            if key and all(key != seen for _, seen in found):
                found.append((source, key))
        return found

    def key_source(self) -> str:
        """Where the key sent to task apps comes from (``none`` if there is none)."""
        return next(iter(self.candidates()), ("none", None))[0]

    def rollout_key(self) -> Secret | None:
        """The key rollouts send (an uploaded key wins: it is what the client said the task app expects)."""
        return next(iter(self.candidates()), ("none", None))[1]

    def probe(
        self,
        url: str,
        client: httpx.Client,
        *,
        any_url: bool,
        set_aside: Callable[[], contextlib.AbstractContextManager[None]],
    ) -> dict[str, Any]:
        """The verify answer for *url* probed with each key (masked); loopback only unless *any_url*."""
        candidates = self.candidates()
        answer: dict[str, Any] = {
            "any_ok": False,
            "endpoint_base_url": url,
            "candidates_first15": [mask_secret(key.value) for _, key in candidates],
        }
        if not (is_loopback_url(url) or any_url):
            error = (
                f"not probed: {url!r} is not on loopback and this fake only calls "
                "loopback task apps (create it with rollouts=True to allow any http(s) URL)"
            )
            return {**answer, "attempts": [{"status": None, "error": error}]}
        attempts: list[dict[str, Any]] = []
        tries: list[tuple[str, Secret | None]] = list(candidates) or [("none", None)]
        for source, key in tries:
            with set_aside():
                report = check_task_app_health(url, key, client=client)
            attempts.append(
                {
                    "status": report.task_info_status,
                    "health_status": report.health_status,
                    "task_info_status": report.task_info_status,
                    "ok": report.ok,
                    "key_source": source,
                    "key_first15": mask_secret(key.value) if key else "<none>",
                    "detail": report.detail,
                }
            )
        return {**answer, "any_ok": any(a["ok"] for a in attempts), "attempts": attempts}
