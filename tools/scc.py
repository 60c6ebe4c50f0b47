"""Tarjan's strongly connected components of a directed graph,
iteratively (no recursion limit): scripts/ext-rooms.py's include
circles, tests/faults/elle.py's dependency cycles."""


def components(graph, key=None):
    """The strongly connected components of graph ({node: iterable of
    successor nodes}; every successor must be a key of graph), each a list
    of nodes, in the order Tarjan's algorithm closes them. Nodes and
    successors are visited in sorted order (by key, when given), so the
    answer is the same from run to run."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph, key=key):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root], key=key)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w], key=key))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out
