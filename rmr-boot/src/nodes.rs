//! Which ranks share a node: [`NodeMap`].

/// The placement of every rank on nodes: node index, node-local rank, and
/// each node's master (its local rank 0). Nodes are numbered in the order
/// of their lowest rank; node-local ranks follow rank order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeMap {
    node_of: Vec<u32>,
    local_of: Vec<u32>,
    ranks_of: Vec<Vec<u32>>,
}

impl NodeMap {
    /// Builds the map from each rank's node name (`keys[rank]`).
    pub fn from_keys<S: AsRef<str>>(keys: &[S]) -> NodeMap {
        let mut names: Vec<&str> = Vec::new();
        let mut node_of = Vec::with_capacity(keys.len());
        let mut local_of = Vec::with_capacity(keys.len());
        let mut ranks_of: Vec<Vec<u32>> = Vec::new();
        for (rank, k) in keys.iter().enumerate() {
            let k = k.as_ref();
            let node = match names.iter().position(|n| *n == k) {
                Some(i) => i,
                None => {
                    names.push(k);
                    ranks_of.push(Vec::new());
                    names.len() - 1
                }
            };
            node_of.push(node as u32);
            local_of.push(ranks_of[node].len() as u32);
            ranks_of[node].push(rank as u32);
        }
        NodeMap { node_of, local_of, ranks_of }
    }

    /// Builds the map from each rank's node name and its node-local rank
    /// as a launcher reported it: within a node, ranks are ordered by those
    /// local ranks (the one with local rank 0 is the master). Falls back to
    /// rank order when the local ranks are not a permutation per node.
    pub fn from_placement<S: AsRef<str>>(keys: &[S], local: &[u32]) -> NodeMap {
        let mut m = NodeMap::from_keys(keys);
        if local.len() != keys.len() {
            return m;
        }
        let mut ranks_of = m.ranks_of.clone();
        for rs in &mut ranks_of {
            rs.sort_by_key(|&r| local[r as usize]);
            if rs.iter().enumerate().any(|(i, &r)| local[r as usize] as usize != i) {
                return m;
            }
        }
        for rs in &ranks_of {
            for (i, &r) in rs.iter().enumerate() {
                m.local_of[r as usize] = i as u32;
            }
        }
        m.ranks_of = ranks_of;
        m
    }

    /// Every rank on one node.
    pub fn single_node(size: usize) -> NodeMap {
        NodeMap::from_keys(&vec![""; size])
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.node_of.len()
    }

    /// Number of nodes.
    pub fn num_nodes(&self) -> usize {
        self.ranks_of.len()
    }

    /// The node index of `rank`.
    ///
    /// # Panics
    /// When `rank >= size()`.
    pub fn node_of(&self, rank: usize) -> usize {
        self.node_of[rank] as usize
    }

    /// The node-local rank of `rank` (0 = the node's master).
    ///
    /// # Panics
    /// When `rank >= size()`.
    pub fn local_rank(&self, rank: usize) -> usize {
        self.local_of[rank] as usize
    }

    /// The ranks on node `node`, in rank order (the first is the master).
    ///
    /// # Panics
    /// When `node >= num_nodes()`.
    pub fn ranks_on(&self, node: usize) -> &[u32] {
        &self.ranks_of[node]
    }

    /// The master (node-local rank 0) of every node, by node index.
    pub fn masters(&self) -> Vec<usize> {
        self.ranks_of.iter().map(|r| r[0] as usize).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_in_order_of_lowest_rank() {
        let m = NodeMap::from_keys(&["b", "a", "b", "c", "a"]);
        assert_eq!(m.num_nodes(), 3);
        assert_eq!((0..5).map(|r| m.node_of(r)).collect::<Vec<_>>(), [0, 1, 0, 2, 1]);
        assert_eq!((0..5).map(|r| m.local_rank(r)).collect::<Vec<_>>(), [0, 0, 1, 0, 1]);
        assert_eq!(m.ranks_on(1), &[1, 4]);
        assert_eq!(m.masters(), [0, 1, 3]);
        assert_eq!(NodeMap::single_node(3).masters(), [0]);
        // A launcher that numbers a node's processes against rank order.
        let p = NodeMap::from_placement(&["a", "a", "b"], &[1, 0, 0]);
        assert_eq!(p.masters(), [1, 2]);
        assert_eq!(p.ranks_on(0), &[1, 0]);
        assert_eq!(p.local_rank(0), 1);
        // Inconsistent local ranks: rank order.
        assert_eq!(NodeMap::from_placement(&["a", "a"], &[0, 0]).masters(), [0]);
    }
}
