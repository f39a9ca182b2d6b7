"""The sliding-window side's own page size (issue #30, decoupled page sizes).

The SWA side may page at a divisor of the full side's page size: each full page then
binds ``page_size // swa_page_size`` SWA pages, and ``free_swa`` releases the window at
the SWA page's grain. None keeps the full side's page size (the reference's layout)."""

from typing import Optional


def swa_page_size_of(page_size: int, swa_page_size: Optional[int]) -> int:
    """The SWA side's page size: swa_page_size, or page_size when None. Raises ValueError
    unless it is a whole number >= 1 dividing page_size (checked before anything is built)."""
    if swa_page_size is None:
        return page_size
    if isinstance(swa_page_size, bool) or not isinstance(swa_page_size, int) or swa_page_size < 1:
        raise ValueError(f"swa_page_size must be an integer >= 1, not {swa_page_size!r}")
    if page_size % swa_page_size != 0:
        raise ValueError(
            f"swa_page_size {swa_page_size} does not divide the full side's page_size "
            f"{page_size}: each full page must hold a whole number of SWA pages"
        )
    return swa_page_size
