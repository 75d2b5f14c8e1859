"""Create the test users of the agora view in the FAB auth manager's tables (run once per deployment).

Run as ``python tests/ui/fab_users.py PASSWORD`` in the deployment's environment, after
``airflow db migrate``. Each role but Admin holds DAG-level permissions only, exactly as a DAG's
``access_control`` would grant them: ``can_read`` / ``can_edit`` on the resource ``DAG:<dag_id>``.
"""

from __future__ import annotations

import sys

from airflow.providers.fab.auth_manager.cli_commands.utils import get_application_builder

EXAMPLE, OTHER = "agora_example_etl", "agora_other"

# user -> (role, [(action, resource)])
USERS: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "admin": ("Admin", []),
    "reader": ("agora_reader", [("can_read", f"DAG:{EXAMPLE}")]),
    "editor": ("agora_editor", [("can_read", f"DAG:{EXAMPLE}"), ("can_edit", f"DAG:{EXAMPLE}")]),
    "outsider": ("agora_outsider", [("can_read", f"DAG:{OTHER}"), ("can_edit", f"DAG:{OTHER}")]),
}


def main(password: str) -> None:
    with get_application_builder() as appbuilder:
        security = appbuilder.sm
        for username, (role_name, grants) in USERS.items():
            role = security.find_role(role_name) or security.add_role(role_name)
            for action, resource in grants:
                security.add_permission_to_role(role, security.create_permission(action, resource))
            if security.find_user(username=username) is None:
                security.add_user(username, username, "agora", f"{username}@example.com", role, password)
    print("users:", ", ".join(USERS))


if __name__ == "__main__":
    main(sys.argv[1])
