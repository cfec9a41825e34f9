//! Compilation of a [`PolicySet`](crate::policy::model::PolicySet) into an index.
