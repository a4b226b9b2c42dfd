"""Minimal pure-torch stand-in for the parts of `lietorch` (princeton-vl/lietorch) that
MASt3R-SLAM's tracker.py, geometry.py and global_opt.py use: `Sim3(data)` with `.data`, `inv()`,
`*` (composition), `act(points)`, `retr(tangent)` and indexing.

Data layout as lietorch: `[tx, ty, tz, qx, qy, qz, qw, s]`; tangent `[tau (3), phi (3), sigma]`;
`retr(a) = Exp(a) * X` (lietorch's `retr`). `Exp` is lietorch's `Sim3::Exp` (include/sim3.h,
rxso3.h: quaternion from `phi` with the small-angle series below EPS, `W = calcW(phi, sigma)`,
translation `W tau`), quaternions are renormalised after every product as lietorch's RxSO3
constructor does. Any dtype; the fixtures run it in float64.
"""

import torch

EPS = 1e-6


def _quat_mul(a, b):
    ax, ay, az, aw = a.unbind(-1)
    bx, by, bz, bw = b.unbind(-1)
    return torch.stack(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ],
        -1,
    )


def _quat_rot(q, p):
    v, w = q[..., :3], q[..., 3:4]
    uv = 2.0 * torch.linalg.cross(v.expand_as(p), p)
    return p + w * uv + torch.linalg.cross(v.expand_as(uv), uv)


def _normalize(q):
    return q / torch.linalg.norm(q, dim=-1, keepdim=True)


def _hat(phi):
    x, y, z = phi.unbind(-1)
    o = torch.zeros_like(x)
    return torch.stack([o, -z, y, z, o, -x, -y, x, o], -1).view(*phi.shape[:-1], 3, 3)


def _exp_one(xi):
    """lietorch Sim3::Exp of one float64 tangent (7,), as Python floats for the branches."""
    tau, phi, sigma = xi[:3], xi[3:6], float(xi[6])
    theta2 = float(phi @ phi)
    theta = theta2**0.5
    if theta < EPS:
        theta4 = theta2 * theta2
        imag = 0.5 - theta2 / 48.0 + theta4 / 3840.0
        real = 1.0 - theta2 / 8.0 + theta4 / 384.0
    else:
        imag = torch.sin(torch.tensor(0.5 * theta, dtype=xi.dtype)) / theta
        real = torch.cos(torch.tensor(0.5 * theta, dtype=xi.dtype))
    q = torch.stack([imag * phi[0], imag * phi[1], imag * phi[2], torch.as_tensor(real, dtype=xi.dtype)])
    scale = torch.exp(torch.tensor(sigma, dtype=xi.dtype))
    Phi = _hat(phi)
    Phi2 = Phi @ Phi
    one = 1.0
    if abs(sigma) < EPS:
        C = torch.tensor(one, dtype=xi.dtype)
        if abs(theta) < EPS:
            A, B = 0.5, 1.0 / 6.0
        else:
            th = torch.tensor(theta, dtype=xi.dtype)
            A = (one - torch.cos(th)) / theta2
            B = (th - torch.sin(th)) / (theta2 * theta)
    else:
        C = (scale - one) / sigma
        if abs(theta) < EPS:
            s2 = sigma * sigma
            A = ((sigma - one) * scale + one) / s2
            B = (scale * 0.5 * s2 + scale - one - sigma * scale) / (s2 * sigma)
        else:
            th = torch.tensor(theta, dtype=xi.dtype)
            a = scale * torch.sin(th)
            b = scale * torch.cos(th)
            c = theta2 + sigma * sigma
            A = (a * sigma + (one - b) * theta) / (theta * c)
            B = (C - ((b - one) * sigma + a * theta) / c) / theta2
    W = A * Phi + B * Phi2 + C * torch.eye(3, dtype=xi.dtype)
    return torch.cat([W @ tau, _normalize(q), scale.view(1)])


class Sim3:
    def __init__(self, data):
        self.data = data

    def _parts(self):
        return self.data[..., :3], self.data[..., 3:7], self.data[..., 7:8]

    def inv(self):
        t, q, s = self._parts()
        qi = torch.cat([-q[..., :3], q[..., 3:]], -1)
        si = 1.0 / s
        return Sim3(torch.cat([-si * _quat_rot(qi, t), qi, si], -1))

    def __mul__(self, other):
        t1, q1, s1 = self._parts()
        t2, q2, s2 = other._parts()
        q = _normalize(_quat_mul(q1, q2))
        return Sim3(torch.cat([t1 + s1 * _quat_rot(q1, t2), q, s1 * s2], -1))

    def act(self, p):
        t, q, s = self._parts()
        return s * _quat_rot(q, p) + t

    @classmethod
    def exp(cls, a):
        flat = a.reshape(-1, 7)
        return cls(torch.stack([_exp_one(x) for x in flat]).view(*a.shape[:-1], 8))

    def retr(self, a):
        return Sim3.exp(a) * self

    def __getitem__(self, idx):
        return Sim3(self.data[idx])

    def __len__(self):
        return self.data.shape[0]
