"""A solver-neutral mixed-integer linear program in matrix form: min c.x, row_lo <= A x <= row_hi.

Formulations build one of these (with MilpBuilder); every backend reads the same arrays, so the
two solvers are given exactly the same model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass(frozen=True, eq=False)
class MilpModel:
    c: np.ndarray
    A: sp.csr_matrix
    row_lo: np.ndarray
    row_hi: np.ndarray
    col_lo: np.ndarray
    col_hi: np.ndarray
    integer: np.ndarray
    """True for integer columns (all integer columns here are binaries through their bounds)."""

    @property
    def n_cols(self) -> int:
        return len(self.c)

    @property
    def n_rows(self) -> int:
        return len(self.row_lo)


MATRIX_DROP_TOL = 1e-10
"""Coefficients smaller than this (model units are ~1) are round-off and are dropped, so that every
backend is given the same matrix (HiGHS would drop entries under 1e-9 on its own)."""


class MilpBuilder:
    """Collects columns and rows (vectorised, as blocks of coordinates) and emits a MilpModel."""

    def __init__(self) -> None:
        self._col_lo: list[np.ndarray] = []
        self._col_hi: list[np.ndarray] = []
        self._cost: list[np.ndarray] = []
        self._integer: list[np.ndarray] = []
        self._n_cols = 0
        self._rows: list[np.ndarray] = []
        self._cols: list[np.ndarray] = []
        self._vals: list[np.ndarray] = []
        self._row_lo: list[np.ndarray] = []
        self._row_hi: list[np.ndarray] = []
        self._n_rows = 0

    def add_cols(self, lo, hi, integer: bool = False, cost=0.0) -> np.ndarray:
        """Add len(lo) columns; returns their indices."""
        lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
        hi = np.broadcast_to(np.asarray(hi, dtype=np.float64), lo.shape).copy()
        self._col_lo.append(lo)
        self._col_hi.append(hi)
        self._cost.append(np.broadcast_to(np.asarray(cost, dtype=np.float64), lo.shape).copy())
        self._integer.append(np.full(lo.shape, integer))
        idx = np.arange(self._n_cols, self._n_cols + len(lo))
        self._n_cols += len(lo)
        return idx

    def add_rows(self, terms, lo, hi) -> np.ndarray:
        """Add m rows. `terms` is a list of (col, coef) pairs, each an array with one entry per row
        or a scalar; the first term's columns must be an array (its length is m).

        A column index < 0 marks an absent term for that row.
        """
        m = len(np.asarray(terms[0][0]))
        lo = np.broadcast_to(np.asarray(lo, dtype=np.float64), (m,)).copy()
        hi = np.broadcast_to(np.asarray(hi, dtype=np.float64), (m,)).copy()
        rows = np.arange(self._n_rows, self._n_rows + m)
        for col, coef in terms:
            col = np.broadcast_to(np.asarray(col, dtype=np.int64), (m,))
            coef = np.broadcast_to(np.asarray(coef, dtype=np.float64), (m,))
            keep = (col >= 0) & (np.abs(coef) > MATRIX_DROP_TOL)
            self._rows.append(rows[keep])
            self._cols.append(col[keep])
            self._vals.append(coef[keep])
        self._row_lo.append(lo)
        self._row_hi.append(hi)
        self._n_rows += m
        return rows

    def add_sum_rows(self, row_of: np.ndarray, cols: np.ndarray, coefs: np.ndarray, lo, hi) -> np.ndarray:
        """Add rows with arbitrary numbers of terms: term k goes to new row row_of[k] (0..m-1)."""
        lo = np.atleast_1d(np.asarray(lo, dtype=np.float64))
        m = len(lo)
        self._rows.append(self._n_rows + np.asarray(row_of, dtype=np.int64))
        self._cols.append(np.asarray(cols, dtype=np.int64))
        self._vals.append(np.asarray(coefs, dtype=np.float64))
        self._row_lo.append(lo)
        self._row_hi.append(np.broadcast_to(np.asarray(hi, dtype=np.float64), (m,)).copy())
        rows = np.arange(self._n_rows, self._n_rows + m)
        self._n_rows += m
        return rows

    def build(self) -> MilpModel:
        cat = lambda parts, dtype: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)  # noqa: E731
        A = sp.coo_matrix(
            (cat(self._vals, np.float64), (cat(self._rows, np.int64), cat(self._cols, np.int64))),
            shape=(self._n_rows, self._n_cols),
        ).tocsr()
        A.sum_duplicates()
        A.data[np.abs(A.data) <= MATRIX_DROP_TOL] = 0.0
        A.eliminate_zeros()
        return MilpModel(
            c=cat(self._cost, np.float64), A=A,
            row_lo=cat(self._row_lo, np.float64), row_hi=cat(self._row_hi, np.float64),
            col_lo=cat(self._col_lo, np.float64), col_hi=cat(self._col_hi, np.float64),
            integer=cat(self._integer, bool),
        )
