//! The search verbs of an admitted call (AuthZEN's Search APIs, docs/authzen.md §4): the
//! engine's searches ([`crate::engine::search`]) over the call's one snapshot, held to this
//! replica's freshness as who-can is (a list of what is allowed is an allow for each entry),
//! with the webhooks' caveat: their grants cannot be listed, so with webhooks in the chain an
//! answer is never complete.

use super::call::Call;
use super::refusal::Refusal;
use crate::engine::search::{self, Found, SubjectKind};
use crate::request::{Action, Content, UserInfo};

impl Call<'_> {
    /// Who may do `action` (on the object `content` describes), as subjects of `kind`.
    pub fn search_subjects(
        &self,
        kind: SubjectKind,
        action: &Action,
        content: Option<&Content>,
    ) -> Result<Found, Refusal> {
        self.searched(|engine| search::subjects(engine, kind, action, content))
    }

    /// What `user` may do to the object of `action` (its verb ignored).
    pub fn search_actions(
        &self,
        user: &UserInfo,
        action: &Action,
        content: Option<&Content>,
    ) -> Result<Found, Refusal> {
        self.searched(|engine| search::actions(engine, user, action, content))
    }

    /// Which objects of `action`'s kind (its name ignored) `user` may act on with its verb.
    pub fn search_resources(
        &self,
        user: &UserInfo,
        action: &Action,
        content: Option<&Content>,
    ) -> Result<Found, Refusal> {
        self.searched(|engine| search::resources(engine, user, action, content))
    }

    fn searched(
        &self,
        search: impl FnOnce(
            &crate::engine::Engine,
        ) -> Result<Found, crate::engine::content::ContentError>,
    ) -> Result<Found, Refusal> {
        let state = self.state();
        state.fresh_for_who_can(self.revision())?;
        let mut found = search(&self.snapshot().engine)?;
        if let Some(delegation) = state.delegation() {
            let errors = delegation.listing_errors();
            found.incomplete.extend(errors.iter().cloned());
            found.errors.extend(errors);
        }
        Ok(found)
    }
}
