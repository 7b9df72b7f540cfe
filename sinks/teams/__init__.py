"""Team boards in Redis: the membership write and the Lua both group writes share.

=========================  ==============================================
``team_lib.lua``           ``team_put``/``team_score``: one (window, team,
                           player) made to agree with the current state
``apply_membership.lua``   a batch of membership records for one game
``store.py``               the membership write, called by ``jobs.teams``
=========================  ==============================================
"""
