"""Fusion grouping: which elementwise nodes run together as one generated kernel, and
the order in which the resulting steps run.

A node joins the group of one of its elementwise producers when it has the same
output dims and none of its other inputs depends (through any path) on that group:
otherwise the group would both feed and wait for that input. Groups are then
scheduled as units by a topological sort of the condensed graph, which is acyclic by
that rule. Values a group produces that anything outside it reads become the
group's outputs; the others live in registers only.
"""
from __future__ import annotations

from rlx_core.ir import Graph, Ref

from .kernels.elementwise import ELEMENTWISE_KINDS

__all__ = ["fusion_groups", "MAX_GROUP_OPS", "MAX_GROUP_INPUTS", "group_outputs"]

MAX_GROUP_OPS = 48
MAX_GROUP_INPUTS = 24
SOURCE_KINDS = frozenset({"input", "param", "constant", "arange"})


def _fusible(node) -> bool:
    return node.kind in ELEMENTWISE_KINDS


def fusion_groups(graph: Graph, fuse: bool = True) -> list[list[int]]:
    """Node ids to run, grouped (elementwise runs) and in a valid execution order.
    Source nodes (inputs, params, constants) are not listed."""
    group_of: dict[int, int] = {}
    groups: list[list[int]] = []
    external: list[set[Ref]] = []
    deps: dict[int, frozenset[int]] = {}
    for node in graph.nodes:
        if node.kind in SOURCE_KINDS:
            deps[node.id] = frozenset()
            continue
        producers = [r.node for r in node.inputs]
        ancestry = set()
        for m in producers:
            ancestry |= deps[m]
            if m in group_of:
                ancestry.add(group_of[m])
        target = None
        if fuse and _fusible(node):
            for m in producers:
                g = group_of.get(m)
                if g is None or not _fusible(graph.nodes[groups[g][0]]) \
                        or graph.nodes[groups[g][0]].outputs[0].dims != node.outputs[0].dims:
                    continue
                if len(groups[g]) >= MAX_GROUP_OPS:
                    continue
                outside = {r for r in node.inputs if group_of.get(r.node) != g}
                if len(external[g] | outside) > MAX_GROUP_INPUTS:
                    continue
                if any(g in deps[r.node] for r in outside):
                    continue
                target = g
                break
        if target is None:
            target = len(groups)
            groups.append([])
            external.append(set())
        groups[target].append(node.id)
        external[target] |= {r for r in node.inputs if group_of.get(r.node) != target}
        group_of[node.id] = target
        deps[node.id] = frozenset(ancestry - {target})
    return _schedule(graph, groups, group_of)


def _schedule(graph: Graph, groups: list[list[int]], group_of: dict[int, int]) -> list[list[int]]:
    """Groups in a topological order of the condensed graph, earliest first member first."""
    needs = [set() for _ in groups]
    for g, members in enumerate(groups):
        for nid in members:
            for r in graph.nodes[nid].inputs:
                p = group_of.get(r.node)
                if p is not None and p != g:
                    needs[g].add(p)
    done: set[int] = set()
    order: list[list[int]] = []
    pending = sorted(range(len(groups)), key=lambda g: groups[g][0])
    while pending:
        for i, g in enumerate(pending):
            if needs[g] <= done:
                order.append(groups[g])
                done.add(g)
                del pending[i]
                break
        else:  # unreachable when the grouping rule held
            raise RuntimeError("fusion produced a cyclic schedule")
    return order


def group_outputs(graph: Graph, members: list[int]) -> list[Ref]:
    """Values of ``members`` read outside the group or returned by the graph."""
    inside = set(members)
    used_outside = {r for n in graph.nodes if n.id not in inside for r in n.inputs}
    used_outside |= set(graph.outputs)
    return [Ref(nid, i) for nid in members for i in range(len(graph.nodes[nid].outputs))
            if Ref(nid, i) in used_outside]
