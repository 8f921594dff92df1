"""The Moshi families refuse a ``moshi`` other than the verified one, in one line with the fix;
a vendor class is replaced through one helper that always subclasses the vendor's class."""

from __future__ import annotations

import pytest

from adapters.face import FamilyError, ModelRequest
from adapters.moshi import vendor
from adapters.moshi.family import MOSHI
from adapters.moshi.vendor import VERIFIED, VendorVersionError, replace_class, require_verified
from adapters.personaplex.family import PERSONAPLEX


def test_the_installed_moshi_is_the_verified_one() -> None:
    require_verified()


@pytest.mark.parametrize("installed", ["0.2.12", "0.2.14", None])
def test_another_moshi_is_refused_in_one_line_naming_it_and_the_fix(
    installed: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def version(name: str) -> str:
        if installed is None:
            raise vendor.metadata.PackageNotFoundError(name)
        return installed

    monkeypatch.setattr(vendor.metadata, "version", version)
    with pytest.raises(VendorVersionError) as caught:
        require_verified()
    message = str(caught.value)
    assert "\n" not in message
    assert (f"moshi {installed} is installed" if installed else "not installed") in message
    assert f"pip install --no-deps moshi=={VERIFIED}" in message


@pytest.mark.parametrize("family", [MOSHI, PERSONAPLEX], ids=["moshi", "personaplex"])
def test_both_families_check_the_version_before_loading(
    family: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vendor.metadata, "version", lambda name: "0.2.9")
    with pytest.raises(FamilyError) as caught:
        family.check(ModelRequest())  # type: ignore[attr-defined]
    assert "moshi 0.2.9 is installed" in str(caught.value)
    assert caught.value.setting == "family"


class _Vendor:
    def hello(self) -> str:
        return "vendor"


def test_replacing_twice_subclasses_the_vendors_class_not_ours() -> None:
    obj = _Vendor()
    replace_class(obj, "Loud", hello=lambda self: self.vendor_class.hello(self).upper())
    assert obj.hello() == "VENDOR"
    assert type(obj).__name__ == "Loud_Vendor"
    replace_class(obj, "Quiet", hello=lambda self: self.vendor_class.hello(self))
    assert type(obj).__bases__ == (_Vendor,)
    assert obj.hello() == "vendor"
    other = _Vendor()
    replace_class(other, "Loud", hello=lambda self: "unused: the class is made once")
    assert type(other) is not _Vendor and other.hello() == "VENDOR"
